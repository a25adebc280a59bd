"""Effective priority: the one number that orders waiting segments and picks
victims. Lower is more urgent (the `Tier` direction).

With ordering "tier" it is the tier value minus an aging boost: one tier per
`aging_step_s` of continuous waiting, at most `max_aging_tiers`, never above
URGENT (1). Running segments do not age. A segment of a team over its quota
is *delayed*: it ranks `DELAYED_RANK` (5), below LOW, and does not age.
"""

from __future__ import annotations

import bisect

from work_pools.policy.model import DELAYED_RANK, Policy, Segment
from yoloq.tiers import Tier

_TOP = int(Tier.URGENT)


def effective_priority(seg: Segment, now: float, policy: Policy, *, delayed: bool = False) -> int:
    if policy.ordering == "fifo":
        return 0
    if policy.ordering == "las":
        return las_queue(seg.attained_gpu_s, policy)
    if delayed:
        return DELAYED_RANK
    return max(_TOP, int(seg.tier) - aging_boost(seg, now, policy))


def aging_boost(seg: Segment, now: float, policy: Policy) -> int:
    """Tiers gained by waiting: floor(wait / aging_step_s), capped."""
    if seg.running or policy.aging_step_s <= 0:
        return 0
    waited = max(0.0, now - seg.waiting_since)
    return min(policy.max_aging_tiers, int(waited // policy.aging_step_s))


def is_starving(seg: Segment, now: float, policy: Policy) -> bool:
    """Waited long enough to have the full boost: ranks first within its tier."""
    if seg.running or policy.aging_step_s <= 0 or policy.ordering != "tier":
        return False
    return now - seg.waiting_since >= policy.max_aging_tiers * policy.aging_step_s


def starvation_bound_s(policy: Policy) -> float:
    """Wait after which any segment ranks as urgent and first among urgent."""
    return policy.max_aging_tiers * policy.aging_step_s


def las_queue(attained_gpu_s: float, policy: Policy) -> int:
    """Tiresias' discretised 2D-LAS: queue k holds jobs whose attained service
    (GPUs x seconds) passed k thresholds; lower queues run first."""
    return bisect.bisect_right(policy.las_thresholds_gpu_s, attained_gpu_s)

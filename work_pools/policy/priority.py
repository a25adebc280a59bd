"""Effective priority: the one number that orders waiting segments and picks
victims. Lower is more urgent (the `Tier` direction).

With ordering "tier" it is the tier value minus an aging boost: one tier per
`aging_step_s` of continuous waiting, at most `max_aging_tiers`, never above
`aging_ceiling` (HIGH by default, so urgent work is never queued behind aged
work; URGENT at most). A running segment keeps the boost it started with. Aging
moves a segment up the queue (it takes GPUs at segment boundaries) but grants the
right to preempt only once the segment is *starving* (it has the full boost): see
`ordering.FairQueue.preemption_rank`. A segment of a team over its quota is
*delayed*: it ranks `DELAYED_RANK` (5), below LOW, and does not age.
"""

from __future__ import annotations

import numpy as np

from work_pools.policy.columns import Columns
from work_pools.policy.model import DELAYED_RANK, Policy, Segment
from yoloq.domain.tiers import Tier

_TOP = int(Tier.URGENT)


def effective_priority(seg: Segment, now: float, policy: Policy, *, delayed: bool = False) -> int:
    return int(ranks_of(Columns((seg,)), now, policy, np.array([delayed]))[0])


def ranks_of(segments: Columns, now: float, policy: Policy, delayed: np.ndarray) -> np.ndarray:
    """`effective_priority` of every segment at once (`delayed`: a mask of those whose team
    is over quota). A pass ranks every running and waiting segment: 10,000 in the pool bench."""
    if policy.ordering == "fifo":
        return np.zeros(segments.n, np.int64)
    if policy.ordering == "las":  # Tiresias' discretised 2D-LAS: queue k holds the segments
        # whose attained service (GPUs x seconds) passed k thresholds; lower queues run first
        thresholds = np.asarray(policy.las_thresholds_gpu_s, float)
        return np.searchsorted(thresholds, segments.attained_gpu_s, side="right").astype(np.int64)
    ceiling = max(_TOP, int(policy.aging_ceiling))
    step, cap = policy.aging_step_s, policy.max_aging_tiers
    tier = segments.tier
    ranks = tier.copy()
    if step > 0:
        started = segments.started_at
        until = np.where(np.isnan(started), now, started)  # a running segment ages no further
        waited = np.maximum(until - segments.waiting_since, 0.0)
        boost = np.minimum(cap, np.floor_divide(waited, step)).astype(np.int64)
        ranks = np.where(tier <= ceiling, tier, np.maximum(ceiling, tier - boost))
    ranks[delayed] = DELAYED_RANK
    return ranks


def starvation_bound_s(policy: Policy) -> float:
    """Wait after which a segment has all the boost it can get (it ranks at the aging
    ceiling, first among its rank): `max_aging_tiers * aging_step_s`."""
    return policy.max_aging_tiers * policy.aging_step_s

"""The scheduling rules, one small named function each.

`decide` composes them; tests exercise them one by one.
"""

from __future__ import annotations

from work_pools.policy.model import DELAYED_RANK, FULL, SHORT, Policy, Segment
from yoloq.domain.tiers import Tier


def check_tier_allowed(team: str, tier: Tier | str | int, policy: Policy) -> str | None:
    """Submit-time tier cap: None when `team` may submit at `tier`, else why not."""
    tier = Tier.parse(tier)
    cap = policy.tier_caps.get(team, policy.default_tier_cap)
    if tier.outranks(cap):
        return (f"team {team!r} may not submit {tier.label} jobs "
                f"(most urgent allowed: {cap.label})")
    return None


def outranks(candidate_rank: int, victim_rank: int) -> bool:
    """A victim must be strictly lower priority (a larger rank) than the waiting segment."""
    return candidate_rank < victim_rank


def protected_by_min_runtime(victim: Segment, now: float, policy: Policy) -> bool:
    """Anti-thrash: a job that has held its GPUs for less than `min_runtime_s` is never
    preempted. The hold starts at `held_since` when given (a job whose next segment
    continued on its GPUs at a boundary keeps its hold), else at the segment's start."""
    since = victim.held_since if victim.held_since is not None else victim.started_at
    return since is not None and now - since < policy.min_runtime_s


def urgent_may_override(victim: Segment, policy: Policy) -> bool:
    """Urgent work is not held up by the anti-thrash rule: with `urgent_overrides_min_runtime`
    an urgent segment may preempt a victim inside its minimum runtime when no other victim
    frees enough (such victims are tried last). Only urgent, only strictly lower ranks."""
    return (policy.preemption and policy.ordering == "tier" and policy.urgent_overrides_min_runtime
            and not victim.stopping)


def fair_share_may_preempt(candidate_ratio: float, victim_ratio: float, policy: Policy) -> bool:
    """Within a tier, a starved team (usage/entitlement <= `fairshare_preempt_under`) may
    preempt a team far over its share (>= `fairshare_preempt_over`)."""
    if policy.fairshare_preempt_over <= 0 or not policy.fair_share:
        return False
    return (candidate_ratio <= policy.fairshare_preempt_under
            and victim_ratio >= policy.fairshare_preempt_over)


def held_share(seg: Segment, policy: Policy) -> float:
    """Share of the rolling window during which the job held a GPU."""
    return seg.held_window_s / policy.long_job_window_s if policy.long_job_window_s > 0 else 0.0


def long_job_rule_on(policy: Policy) -> bool:
    return policy.ordering == "tier" and 0 < policy.long_job_share < 1


def yields_to_short(seg: Segment, short_waiting: bool, policy: Policy) -> bool:
    """The 70% rule: at a segment boundary, a full training that held its GPU more than
    `long_job_share` of the window goes behind the short experiments waiting at its rank."""
    return (short_waiting and long_job_rule_on(policy) and seg.job_class == FULL
            and held_share(seg, policy) > policy.long_job_share)


def is_small(mem_gb: float, gpu_total_gb: float, policy: Policy) -> bool:
    """Small enough to share a GPU (when `share_gpus` is on)."""
    return mem_gb <= policy.share_max_fraction * gpu_total_gb


def reduced_batch(seg: Segment, free_gb: float, policy: Policy) -> int | None:
    """Largest batch below the requested one whose memory fits `free_gb`, or None."""
    if seg.mem_per_image_gb <= 0:
        return None
    fits = int((free_gb - seg.fixed_mem_gb) // seg.mem_per_image_gb)
    batch = min(seg.batch - 1, fits)
    return batch if batch >= max(1, policy.min_reduced_batch) else None


def victim_tier(victim: Segment, rank: int, policy: Policy) -> int:
    """The rank victims are ordered by: with tiers, the victim's own tier, or its effective
    rank when that is lower (delayed: over quota); the aging boost a running segment started
    with does not count. Other orderings (fifo, LAS queues): its rank."""
    if policy.ordering != "tier":
        return rank
    return max(rank, int(victim.tier))


def victim_key(victim: Segment, rank: int, now: float | None = None) -> tuple:
    """Victim preference, best victim first: already stopping, lowest priority, least work
    lost (GPU-seconds since its last checkpoint; without `now`: the newest checkpoint),
    least progressed, then id (deterministic)."""
    checkpoint = victim.last_checkpoint_at if victim.last_checkpoint_at is not None else float("-inf")
    lost = -checkpoint if now is None else (now - checkpoint) * max(1, len(victim.gpu_indices))
    return (not victim.stopping, -rank, lost, victim.progress, victim.id)


def rank_label(rank: int, policy: Policy) -> str:
    """How a rank reads in reasons: a tier name, "delayed", or a LAS queue."""
    if policy.ordering == "las":
        return f"LAS queue {rank}"
    if policy.ordering == "fifo":
        return "fifo"
    if rank >= DELAYED_RANK:
        return "delayed"
    return Tier(rank).label


def segment_label(seg: Segment, rank: int, policy: Policy) -> str:
    """"urgent", or "low, aged to high" when waiting raised its rank."""
    label = rank_label(rank, policy)
    if policy.ordering == "tier" and rank < int(seg.tier):
        return f"{seg.tier.label}, aged to {label}"
    return label


def throttle_batch(victim: Segment, gpu_total_gb: float, guest_mem_gb: float,
                   policy: Policy) -> int | None:
    """Soft preemption: the batch the victim keeps so that `guest_mem_gb` fits beside it on a
    GPU of `gpu_total_gb` (its own batch when it already fits), or None when even
    `soft_min_batch` does not leave room. Needs the victim's memory model."""
    if victim.mem_per_image_gb <= 0 or len(victim.gpu_indices) != 1:
        return None
    room = gpu_total_gb - guest_mem_gb - victim.fixed_mem_gb
    batch = min(victim.batch, int(room // victim.mem_per_image_gb))
    return batch if batch >= max(1, policy.soft_min_batch) else None


def accumulate_for(batch: int, nbs: int = 64) -> int:
    """Gradient accumulation that keeps the effective batch `nbs` (ultralytics' rule)."""
    return max(round(nbs / max(batch, 1)), 1)

"""Wait-time estimates: queue position and start time with an 80% interval.

The policy is run forward over the current queue: waiting segments are taken
in `FairQueue` order and each starts on the GPUs (whole, memory large enough)
that become available first, running for its estimated remaining time scaled by
GPU speed. A segment may take a GPU early from a strictly lower-ranked occupant
once that occupant is past its minimum runtime (preemption), as `decide` would.

Durations are estimates with lognormal error of sigma `policy.eta_sigma`; the
run is repeated with every duration multiplied by its 10th and 90th percentile
(exp(-/+1.2816 sigma)), which gives the interval. This treats errors as fully
correlated (a deliberate, cheap approximation) and ignores future arrivals;
the simulator measures how well the interval covers the actual start.

Aging is modelled as it will be, not as it is: the queue order is taken at
`now + starvation_bound_s` (every waiting segment with the full aging boost it
reaches by then), because a segment that waits long enough to matter has aged;
the aged rank wins GPUs (boundaries, preemption) only from that time on.
Without this, a low-tier job was predicted to wait behind all high-tier work
that its aging lets it pass within minutes (median error of the raw run 2.6 on
the overloaded trace with the yoloq preset; 0.53 with it).

Segment boundaries are modelled: a running segment ends its segment at
`started_at + policy.segment_s`, and a waiting segment that comes first in the
queue order (a more urgent rank, or, with SRPT, the same rank and less
remaining work) takes its GPU at that boundary rather than when the job ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from work_pools.policy import fairshare, rules
from work_pools.policy.model import Policy, Snapshot
from work_pools.policy.ordering import Context, FairQueue, build_context, srpt_keys
from work_pools.policy.priority import starvation_bound_s

Z80 = 1.2816  # standard normal 90th percentile: [p10, p90] is the 80% interval


@dataclass(frozen=True)
class Eta:
    segment_id: str
    position: int  # 1 = next to start
    start_s: float  # median estimate, absolute time
    start_low_s: float  # 10th percentile
    start_high_s: float  # 90th percentile


@dataclass
class _Slot:
    """One GPU in the forward run."""

    index: int
    node: str
    total_gb: float
    speed: float
    free_at: float
    rank: float
    preemptible_at: float
    work: float = math.inf  # the occupant's SRPT key (remaining work, aged)
    boundary_at: float = math.inf  # the occupant's segment ends here


def estimate(snapshot: Snapshot, policy: Policy, now: float,
             only: Iterable[str] | None = None) -> dict[str, Eta]:
    """Position and start estimates for waiting segments (all, or the ids in `only`)."""
    wanted = set(only) if only is not None else None
    low = math.exp(-Z80 * policy.eta_sigma)
    high = math.exp(Z80 * policy.eta_sigma)
    positions, mid = _forward(snapshot, policy, now, 1.0, wanted)
    _, early = _forward(snapshot, policy, now, low, wanted)
    _, late = _forward(snapshot, policy, now, high, wanted)
    return {sid: Eta(sid, positions[sid], mid[sid], min(early[sid], mid[sid]),
                     max(late[sid], mid[sid]))
            for sid in mid if sid in early and sid in late and (wanted is None or sid in wanted)}


@dataclass(frozen=True)
class _Claim:
    """How a waiting segment competes for a GPU: its rank now, and the aged rank it
    reaches from `aged_from` on (the same when it does not age)."""

    rank: int
    aged_rank: int
    aged_from: float
    work: float


def _forward(snapshot: Snapshot, policy: Policy, now: float, scale: float,
             wanted: set[str] | None) -> tuple[dict[str, int], dict[str, float]]:
    horizon = _aged_horizon(policy)
    ctx = build_context(snapshot, policy, now + horizon)
    current = ctx.ranks_at(now)
    work = _works(ctx, now, policy)
    slots = _initial_slots(snapshot, ctx.ranks, policy, now, scale, work)
    positions: dict[str, int] = {}
    starts: dict[str, float] = {}
    queue = FairQueue(ctx)
    for position, (seg, rank) in enumerate(queue, start=1):
        claim = _Claim(current[seg.id], rank, now + horizon, work[seg.id])
        chosen = _earliest(slots, seg.est_mem_gb, seg.gpus, claim, policy)
        if chosen is None:
            continue  # can never fit: no estimate
        start = max(now, max(_ready_at(s, claim, policy) for s in chosen))
        speed = min(s.speed for s in chosen)
        end = start + scale * seg.est_remaining_s / max(speed, 1e-9)
        for slot in chosen:
            slot.free_at, slot.work = end, claim.work
            slot.rank = claim.aged_rank if start >= claim.aged_from else claim.rank
            slot.preemptible_at = start + policy.min_runtime_s
            slot.boundary_at = start + policy.segment_s
        queue.charge(seg.team, fairshare.tu(speed, end - start, seg.gpus))
        positions[seg.id], starts[seg.id] = position, start
        if wanted is not None and wanted <= starts.keys():
            break
    return positions, starts


def _aged_horizon(policy: Policy) -> float:
    """How far ahead the queue order is read: the wait after which aging is complete."""
    if policy.ordering != "tier" or policy.aging_step_s <= 0:
        return 0.0
    return starvation_bound_s(policy)


def _initial_slots(snapshot: Snapshot, ranks: dict[str, int], policy: Policy, now: float,
                   scale: float, work: dict[str, float]) -> list[_Slot]:
    slots = {g.key: _Slot(g.index, g.node, g.mem_total_gb, g.speed, now, math.inf, now)
             for g in snapshot.gpus}
    for seg in snapshot.running:
        for i in seg.gpu_indices:
            slot = slots.get((seg.node, i))
            if slot is None:
                continue
            end = now + scale * seg.est_remaining_s / max(slot.speed, 1e-9)
            slot.free_at = max(slot.free_at, end)
            slot.rank = min(slot.rank, ranks[seg.id])
            started = seg.started_at if seg.started_at is not None else now
            slot.preemptible_at = max(slot.preemptible_at, started + policy.min_runtime_s)
            slot.work = min(slot.work, work[seg.id]) if slot.work < math.inf else work[seg.id]
            boundary = started + policy.segment_s
            while boundary < now:
                boundary += policy.segment_s
            slot.boundary_at = boundary
    return list(slots.values())


def _works(ctx: Context, now: float, policy: Policy) -> dict[str, float]:
    """Segment id -> the SRPT key it competes with (infinite without SRPT)."""
    srpt = policy.within_rank == "srpt" and policy.ordering == "tier"
    works: dict[str, float] = {}
    for segments in (ctx.running, ctx.waiting):
        keys = srpt_keys(segments, now, policy).tolist() if srpt else [math.inf] * segments.n
        works.update(zip(segments.ids, keys))
    return works


def _available_at(slot: _Slot, rank: int, policy: Policy, work: float = math.inf) -> float:
    at = slot.free_at
    if policy.preemption and rules.outranks(rank, slot.rank):
        at = min(at, max(slot.preemptible_at, 0.0))
    if rank < slot.rank or (rank == slot.rank and work < slot.work):
        at = min(at, slot.boundary_at)  # it goes first when the occupant's segment ends
    return at


def _ready_at(slot: _Slot, claim: _Claim, policy: Policy) -> float:
    """When the slot is available to the claim: with its rank now, or with its aged rank
    once it has aged."""
    at = _available_at(slot, claim.rank, policy, claim.work)
    if claim.aged_rank != claim.rank:
        aged = _available_at(slot, claim.aged_rank, policy, claim.work)
        at = min(at, max(aged, claim.aged_from))
    return at


def _earliest(slots: list[_Slot], mem_gb: float, count: int, claim: _Claim,
              policy: Policy) -> list[_Slot] | None:
    """The `count` GPUs of one node that are all available soonest."""
    fitting = [s for s in slots if s.total_gb >= mem_gb]
    if len(fitting) < count:
        return None
    fitting.sort(key=lambda s: (_ready_at(s, claim, policy), s.total_gb, -s.speed,
                                s.node, s.index))
    if count == 1:
        return fitting[:1]
    per_node: dict[str, list[_Slot]] = {}
    best: list[_Slot] | None = None
    for slot in fitting:
        group = per_node.setdefault(slot.node, [])
        group.append(slot)
        if len(group) == count:
            best = group
            break
    return best

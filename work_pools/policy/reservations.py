"""Backfill with reservations for gang jobs, as Slurm's backfill does.

A waiting multi-GPU segment that has reached the front (critical path or starving, see
`ordering`) and cannot start now reserves the GPUs of the node where it can start soonest:
the free ones are kept from segments behind it in the queue, and the busy ones join it as
their segments end (at their segment boundary, or when the job's work runs out). A segment
behind it may still use a reserved GPU when it is expected to finish before the
reservation starts (`Reservation.window_s`): its remaining work fits in that window.
Without this, every GPU that freed went to the first short segment behind the gang, and the
gang started only when a whole node happened to free at once: at the end of the trace.

Pure: the times are read from the running segments (`started_at`, `segment_s`, remaining
work); the clock is the `now` passed to `decide`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from work_pools.policy.model import Policy, Segment
from work_pools.policy.placement import GpuPool


@dataclass
class Reservation:
    job_id: str
    slots: tuple[int, ...]  # the GPUs it will start on
    starts_at: float  # when the last of them frees
    now: float
    free: list[int] = field(default_factory=list)  # reserved slots still empty this round

    @property
    def window_s(self) -> float:
        return self.starts_at - self.now


def segment_end(seg: Segment, now: float, policy: Policy, speed: float) -> float:
    """When a running segment gives its GPUs back: at its segment boundary, or sooner when
    its job's remaining work runs out."""
    started = seg.started_at if seg.started_at is not None else now
    boundary = started + policy.segment_s
    while boundary < now:
        boundary += policy.segment_s
    left = seg.est_remaining_s / max(speed, 1e-9)
    return max(now, min(boundary, now + left))


def fits_in_window(seg: Segment, window_s: float, speed: float) -> bool:
    """Will a waiting segment be done (its job finished) before a reservation starts?"""
    return seg.est_remaining_s / max(speed, 1e-9) <= window_s


def reserve_for(seg: Segment, pool: GpuPool, running: Iterable[Segment], now: float,
                policy: Policy, promised: set[int]) -> Reservation | None:
    """The node where `seg` (several GPUs) can start soonest, and the GPUs it would take
    there (none `promised` to an earlier reservation); None when no node has enough GPUs
    with room for it once they are empty."""
    ends: dict[str, float] = {}
    for other in running:
        for s in pool.slots(other):
            speed = pool.gpus[s].speed
            ends[other.id] = max(ends.get(other.id, now), segment_end(other, now, policy, speed))
    best: tuple[float, str, tuple[int, ...]] | None = None
    by_node: dict[str, list[tuple[float, int]]] = {}
    for s, gpu in pool.gpus.items():
        if gpu.mem_total_gb < seg.est_mem_gb or s in pool.reserved or s in promised:
            continue
        free_at = max((ends.get(occupant, now) for occupant, _ in pool.occupants[s]), default=now)
        by_node.setdefault(gpu.node, []).append((free_at, s))
    for node, slots in sorted(by_node.items()):
        if len(slots) < seg.gpus:
            continue
        chosen = sorted(slots)[:seg.gpus]
        starts = chosen[-1][0]
        if best is None or (starts, node) < (best[0], best[1]):
            best = (starts, node, tuple(s for _, s in chosen))
    if best is None:
        return None
    starts, _, slots = best
    free = [s for s in slots if not pool.occupants[s]]
    return Reservation(seg.job_id, slots, starts, now, free)

"""GPUs held for a preemptor between its victim's exit and its own admission.

A victim takes seconds to reach its epoch boundary; while it stops, `decide` keeps it for the
job it stops for (`policy.victims`). Once its process has exited, its GPUs are free, and the
pass that sees them free may reach a segment ahead of that job in the queue first: without a
hold, that segment takes the GPUs and the job preempts a second victim. The leader remembers
which job each stopping victim stops for, and holds the victim's GPUs for that job from its
exit until the job is admitted, stops waiting, or `HOLD_S` has passed. The memory is the
leader's: a new leader starts without holds (at worst one extra preemption).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from work_pools.policy.model import Segment

HOLD_S = 60.0  # longer than a pass on a loaded server; a job not admitted by then gives it up

Where = tuple[str, int]  # (node, local GPU index): stable while global indices are renumbered


@dataclass
class StopHolds:
    stopping: dict[str, tuple[str, tuple[Where, ...]]] = field(default_factory=dict)  # victim id -> (job, GPUs)
    held: dict[Where, tuple[str, float]] = field(default_factory=dict)  # GPU -> (job, since)

    def current(self, occupying: Iterable[str], waiting_jobs: set[str], now: float) -> dict[Where, str]:
        """The holds for this pass: GPUs of remembered victims that no longer occupy them,
        for jobs that still wait (expired and served holds are dropped)."""
        occupying = set(occupying)
        for victim, (job, gpus) in list(self.stopping.items()):
            if victim not in occupying:  # its process has exited: its GPUs are free now
                del self.stopping[victim]
                for gpu in gpus:
                    self.held[gpu] = (job, now)
        self.held = {gpu: (job, since) for gpu, (job, since) in self.held.items()
                     if job in waiting_jobs and now - since < HOLD_S}
        return {gpu: job for gpu, (job, _) in self.held.items()}

    def observe(self, running: Iterable[Segment], where: Mapping[int, Where]) -> None:
        """Remember the victims now stopping for a job (from this pass's snapshot)."""
        for seg in running:
            if seg.stopping and seg.stopping_for:
                gpus = tuple(where[i] for i in seg.gpu_indices if i in where)
                self.stopping[seg.id] = (seg.stopping_for, gpus)

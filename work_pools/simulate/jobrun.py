"""A job's life in the simulator: the mutable state `engine` and `sharing` both work on.

Below both, so that `sharing` (mixed into `engine.Simulator`) need not import `engine`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from work_pools.policy.eta import Eta
from work_pools.policy.model import Segment
from work_pools.simulate.trace import TraceJob

BATCH = 16
_FIXED_SHARE = 0.35


def memory_model(mem_gb: float) -> tuple[float, float]:
    """(fixed GB, GB per image) of a job whose peak at the default batch is `mem_gb`."""
    return _FIXED_SHARE * mem_gb, (1 - _FIXED_SHARE) * mem_gb / BATCH


@dataclass
class JobRun:
    """A job's life in the simulation (mutable: this is the simulator's own state)."""

    spec: TraceJob
    est_duration_s: float
    done_s: float = 0.0  # reference seconds of work done
    gpus_held: tuple[int, ...] = ()
    speed: float = 0.0
    run_start: float = 0.0  # since the last speed change (progress accounting)
    started_seg_at: float = 0.0  # when the current segment started
    held_since: float = 0.0  # when the job's uninterrupted hold of its GPUs began
    last_gpus: tuple[int, ...] = ()
    last_stop: float | None = None
    waiting_since: float = 0.0
    segment_no: int = 0
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    redone_gpu_s: float = 0.0
    run_s: float = 0.0
    speed_s: float = 0.0  # integral of speed over run time (for the mean speed)
    attained_gpu_s: float = 0.0
    held: deque = field(default_factory=deque)  # (start, end) intervals holding a GPU
    eta: Eta | None = None  # calibrated (what the board shows)
    eta_raw: Eta | None = None  # the forward run alone
    segment: Segment | None = None  # cached waiting segment
    in_system_at_submit: float = 0.0  # the simulator's jobs-in-system integral at submit
    in_system_at_finish: float = 0.0
    batch: int = 16  # the simulator's batch (a throttle lowers it)
    throttled: int = 0  # times this job was throttled (soft preemption)
    sharing_with: str | None = None  # job id sharing this job's GPU

    @property
    def mem_gb(self) -> float:
        """Memory at the current batch: 35% fixed, 65% proportional to the batch."""
        fixed, per_image = memory_model(self.spec.gpu_mem_gb)
        return fixed + self.batch * per_image

    @property
    def epoch_s(self) -> float:
        return self.spec.duration_s / self.spec.epochs

    @property
    def id(self) -> str:
        return self.spec.job_id

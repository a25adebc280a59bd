"""Does a job fit some GPU of the pool, at its batch or at the smallest batch the policy allows?

Pure: the analysis, the pool's GPUs as (node, name, total memory) and the smallest batch
go in; a verdict comes out. `yoloq submit` feeds it the live inventory of every node
(`work_pools.nodes.live_pool_gpus`) and refuses a job that fits nowhere, with the numbers
of the largest GPU, instead of queueing a job that would wait forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from yoloq.analysis import estimates
from yoloq.base.errors import UserError


class Needs(Protocol):
    """What the check reads from an analysis (yoloq.analysis.Analysis has all of it)."""

    params_m: float
    gflops: float
    imgsz: int
    batch: int
    amp: bool


@dataclass(frozen=True)
class PoolGpu:
    node: str
    name: str
    mem_total_gb: float


@dataclass(frozen=True)
class FitVerdict:
    ok: bool
    refusal: UserError | None  # when not ok; `refusal.line()` is the one line
    gpu: PoolGpu | None  # the GPU taking the largest batch (the largest GPU when none fits)
    batch: int  # the batch that runs there: the job's, or a reduced one; 0 when not ok
    reduced: bool  # fits only with a batch below the job's

    @property
    def line(self) -> str | None:
        return self.refusal.line() if self.refusal else None


def check_fit(job: Needs, pool: Sequence[PoolGpu], min_batch: int) -> FitVerdict:
    """ok when some GPU holds the job's batch, or at least `min_batch` (a reduced batch)."""
    if not pool:
        return FitVerdict(False, UserError("pool", "has no GPU", "start a node agent, or check the pool name"),
                          None, 0, False)
    floor = max(1, min(min_batch, job.batch))
    capacity = {gpu: _capacity(job, gpu) for gpu in pool}
    best = max(pool, key=lambda g: (capacity[g], g.mem_total_gb, g.node, g.name))
    if capacity[best] >= job.batch:
        return FitVerdict(True, None, best, job.batch, False)
    if capacity[best] >= floor:
        return FitVerdict(True, None, best, capacity[best], True)
    return FitVerdict(False, _refusal(job, best, capacity[best], floor), best, 0, False)


def _capacity(job: Needs, gpu: PoolGpu) -> int:
    return estimates.batch_capacity(job.params_m, job.gflops, job.imgsz, gpu.mem_total_gb, job.amp)


def _refusal(job: Needs, largest: PoolGpu, capacity: int, floor: int) -> UserError:
    need = estimates.peak_memory_gb(job.params_m, job.gflops, job.imgsz, job.batch, job.amp)
    text = f"{job.batch} needs about {need:.1f} GB"
    if floor < job.batch:
        least = estimates.peak_memory_gb(job.params_m, job.gflops, job.imgsz, floor, job.amp)
        text += f" ({least:.1f} GB at {floor}, the smallest batch the policy allows)"
    usable = largest.mem_total_gb * estimates.USABLE_FRACTION
    text += (f"; it fits no GPU in the pool: the largest, {largest.name} on node {largest.node}, has "
             f"{largest.mem_total_gb:.0f} GB ({usable:.0f} GB usable), where at most {capacity} fits")
    return UserError("batch", text, "lower batch or imgsz, or use a smaller model")

"""Builders for snapshots in tests, examples and benchmarks (Kueue-style):

    make_job("a").tier("urgent").mem(12).running_on(0, started=0).obj()
    make_gpus("2xA100-80GB,1xV100-32GB")
"""

from __future__ import annotations

from dataclasses import replace

from work_pools.policy.model import FULL, SHORT, Gpu, Segment
from yoloq.domain.gpus import lookup
from yoloq.domain.tiers import Tier


class SegmentBuilder:
    def __init__(self, job_id: str) -> None:
        self._seg = Segment(id=f"{job_id}/s1", job_id=job_id, team="team-a", tier=Tier.NORMAL,
                            submitted_at=0.0, waiting_since=0.0, est_mem_gb=8.0)

    def _set(self, **changes) -> "SegmentBuilder":
        self._seg = replace(self._seg, **changes)
        return self

    def tier(self, tier: Tier | str) -> "SegmentBuilder":
        return self._set(tier=Tier.parse(tier))

    def team(self, team: str) -> "SegmentBuilder":
        return self._set(team=team)

    def mem(self, gb: float) -> "SegmentBuilder":
        return self._set(est_mem_gb=gb)

    def gpus(self, count: int) -> "SegmentBuilder":
        return self._set(gpus=count)

    def submitted(self, at: float) -> "SegmentBuilder":
        return self._set(submitted_at=at, waiting_since=max(at, self._seg.waiting_since))

    def waiting_since(self, at: float) -> "SegmentBuilder":
        return self._set(waiting_since=at)

    def short(self) -> "SegmentBuilder":
        return self._set(job_class=SHORT)

    def full(self, held_window_s: float = 0.0) -> "SegmentBuilder":
        return self._set(job_class=FULL, held_window_s=held_window_s)

    def remaining(self, seconds: float) -> "SegmentBuilder":
        return self._set(est_remaining_s=seconds)

    def progress(self, epoch: int, epochs: int) -> "SegmentBuilder":
        return self._set(epoch=epoch, epochs=epochs)

    def batch(self, batch: int, per_image_gb: float, fixed_gb: float = 0.0) -> "SegmentBuilder":
        return self._set(batch=batch, mem_per_image_gb=per_image_gb, fixed_mem_gb=fixed_gb)

    def attained(self, gpu_s: float) -> "SegmentBuilder":
        return self._set(attained_gpu_s=gpu_s)

    def running_on(self, *indices: int, started: float = 0.0,
                   checkpoint: float | None = None) -> "SegmentBuilder":
        """Running since `started`, having waited no time (set `waiting_since` after to age)."""
        return self._set(gpu_indices=tuple(indices), started_at=started, waiting_since=started,
                         submitted_at=min(self._seg.submitted_at, started),
                         last_checkpoint_at=checkpoint, gpus=len(indices))

    def stopping(self, for_job: str = "") -> "SegmentBuilder":
        """Asked to stop at its next boundary; `for_job` is the job it was preempted for."""
        return self._set(stopping=True, stopping_for=for_job)

    def obj(self) -> Segment:
        return self._seg


def make_job(job_id: str) -> SegmentBuilder:
    return SegmentBuilder(job_id)


def make_gpus(spec: str, used_gb: dict[int, float] | None = None) -> tuple[Gpu, ...]:
    """GPUs from "2xA100-80GB,1xV100-32GB"; `used_gb` takes memory off given indices."""
    gpus: list[Gpu] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        count, _, name = part.partition("x") if "x" in part.split("-")[0] else ("1", "", part)
        kind = lookup(name)
        for _ in range(int(count)):
            index = len(gpus)
            used = (used_gb or {}).get(index, 0.0)
            gpus.append(Gpu(index, kind.name, kind.mem_gb, kind.mem_gb - used, kind.speed,
                            uuid=f"GPU-{index:04d}"))
    return tuple(gpus)

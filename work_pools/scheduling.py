"""The worker's side of scheduling: turn what it sees into a Snapshot, ask the pure
`decide`, and map the Decision back onto flow runs. No rules live here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from uuid import UUID

from work_pools.inventory import GpuInfo
from work_pools.policy.model import Decision, Gpu, Policy, Segment, Snapshot
from work_pools.segments import SegmentView
from yoloq import gpus as gpu_catalog

DEFAULT_MIN_GRACE_S = 60.0


@dataclass(frozen=True)
class WorkerPolicy:
    """The policy plus the mechanism's own knobs (grace before a victim is killed)."""

    policy: Policy = field(default_factory=Policy)
    min_grace_s: float = DEFAULT_MIN_GRACE_S
    grace_epochs: float = 2.0

    @classmethod
    def from_env(cls) -> "WorkerPolicy":
        env = os.environ
        policy = Policy(min_runtime_s=float(env.get("YOLOQ_MIN_RUNTIME_S", 300)))
        return cls(policy=policy, min_grace_s=float(env.get("YOLOQ_GRACE_S", DEFAULT_MIN_GRACE_S)),
                   grace_epochs=float(env.get("YOLOQ_GRACE_EPOCHS", 2.0)))

    def grace_for(self, est_epoch_s: float) -> float:
        """A victim may take this long to reach its next boundary before it is killed."""
        return max(self.min_grace_s, self.grace_epochs * est_epoch_s)


@dataclass(frozen=True)
class Admit:
    flow_run_id: UUID
    gpus: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Stop:
    flow_run_id: UUID
    by_job: str
    reason: str


@dataclass(frozen=True)
class WorkerDecision:
    admit: tuple[Admit, ...]
    preempt: tuple[Stop, ...]
    waiting: dict[UUID, str]
    raw: Decision


def schedule(inventory: list[GpuInfo], running: list[SegmentView], pending: list[SegmentView],
             reserved: dict[UUID, tuple[int, ...]], started_at: dict[UUID, float], now: float,
             worker_policy: WorkerPolicy, asked: set[UUID] | None = None,
             usage_tu: dict[str, float] | None = None) -> WorkerDecision:
    from work_pools.policy.decide import decide

    snapshot = build_snapshot(inventory, running, pending, reserved, started_at, asked or set(),
                              usage_tu or {})
    decision = decide(snapshot, worker_policy.policy, now)
    by_id = {str(v.flow_run_id): v for v in (*running, *pending)}
    return WorkerDecision(
        admit=tuple(Admit(by_id[a.segment_id].flow_run_id, a.gpu_indices, a.reason)
                    for a in decision.admit),
        preempt=tuple(Stop(by_id[p.segment_id].flow_run_id, p.by_job_id, p.reason)
                      for p in decision.preempt),
        waiting={by_id[k].flow_run_id: v for k, v in decision.waiting.items() if k in by_id},
        raw=decision,
    )


def build_snapshot(inventory: list[GpuInfo], running: list[SegmentView], pending: list[SegmentView],
                   reserved: dict[UUID, tuple[int, ...]], started_at: dict[UUID, float],
                   asked: set[UUID], usage_tu: dict[str, float]) -> Snapshot:
    """Free memory = declared/NVML total minus what admitted segments were estimated to use."""
    used: dict[int, float] = {}
    for view in running:
        for index in reserved.get(view.flow_run_id, ()):
            used[index] = used.get(index, 0.0) + view.est_mem_gb
    gpus = tuple(_gpu(g, used.get(g.index, 0.0)) for g in inventory)
    run_segments = tuple(_segment(v, reserved.get(v.flow_run_id, ()),
                                  started_at.get(v.flow_run_id, v.queued_at),
                                  v.flow_run_id in asked) for v in running)
    wait_segments = tuple(_segment(v, (), None, False) for v in pending)
    return Snapshot(gpus=gpus, running=run_segments, waiting=wait_segments, team_usage_tu=usage_tu)


def _gpu(info: GpuInfo, used_gb: float) -> Gpu:
    speed = _speed(info)
    free = info.mem_total_gb - used_gb if not info.is_real else min(info.mem_free_gb,
                                                                    info.mem_total_gb - used_gb)
    return Gpu(index=info.index, name=info.name, mem_total_gb=info.mem_total_gb,
               mem_free_gb=max(0.0, free), speed=speed, uuid=info.uuid)


def _speed(info: GpuInfo) -> float:
    if not info.is_real:
        return gpu_catalog.CPU_SLOT.speed
    try:
        return gpu_catalog.lookup(info.name).speed
    except KeyError:
        return 1.0


def _segment(view: SegmentView, gpu_indices: tuple[int, ...], started: float | None,
             stopping: bool) -> Segment:
    remaining_epochs = max(0, view.epochs - view.progress_epoch)
    return Segment(
        id=str(view.flow_run_id), job_id=view.job_id, team=view.team, tier=view.tier,
        submitted_at=view.queued_at, waiting_since=view.queued_at, est_mem_gb=view.est_mem_gb,
        job_class=view.job_class, est_remaining_s=max(1.0, remaining_epochs * view.est_epoch_s),
        epoch=view.progress_epoch, epochs=view.epochs, gpu_indices=gpu_indices,
        started_at=started, last_checkpoint_at=view.checkpoint_at, stopping=stopping)

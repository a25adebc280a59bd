"""The worker's side of scheduling: turn what it sees into a Snapshot, ask the pure
`decide`, and map the Decision back onto flow runs. No rules live here.

The usage ledger (`work_pools.usage_state`) supplies fair-share usage, quota spend, and
per job the GPU time held in the 70% rule's window, the service attained (LAS) and
when it last ran (aging counts continuous waiting only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from uuid import UUID

from work_pools import usage_state
from work_pools.inventory import GpuInfo
from work_pools.policy.model import LOCAL_NODE, Decision, Gpu, Policy, Segment, Snapshot
from work_pools.segments import PREEMPTED_BY_LABEL, SegmentView
from yoloq.domain import gpus as gpu_catalog

DEFAULT_MIN_GRACE_S = 60.0
HOLD_GAP_S = 60.0  # a job off its GPU for less than this between segments held it throughout


@dataclass(frozen=True)
class WorkerPolicy:
    """The policy plus the mechanism's own knobs (grace before a victim is killed)."""

    policy: Policy = field(default_factory=Policy)
    min_grace_s: float = DEFAULT_MIN_GRACE_S
    grace_epochs: float = 2.0

    source: str = "defaults"

    @classmethod
    def from_env(cls) -> "WorkerPolicy":
        """Resolved once: the saved `yoloq-policy` block, else environment overrides, else
        defaults (`blocks.policy.resolve_policy_settings`)."""
        from blocks.policy import resolve_policy_settings

        resolved = resolve_policy_settings()
        return cls(policy=resolved.policy, min_grace_s=resolved.min_grace_s,
                   grace_epochs=resolved.grace_epochs, source=resolved.source)

    def grace_for(self, epoch_s: float) -> float:
        """A victim may take this long to reach its next boundary before it is killed."""
        return max(self.min_grace_s, self.grace_epochs * epoch_s)


def epoch_time_here(started_at: float | None, view: SegmentView, gpu_speed: float) -> float:
    """A running segment's epoch time on the GPU it runs on, for its grace: measured from its
    own labels (time since its start over epochs done in this segment) once an epoch ended;
    before that, the V100-referenced estimate divided by this GPU's speed."""
    done = view.progress_epoch - view.epochs_done
    if started_at is not None and view.checkpoint_at is not None and done > 0:
        return max(1.0, (view.checkpoint_at - started_at) / done)
    return view.est_epoch_s / (gpu_speed if gpu_speed > 0 else 1.0)


@dataclass(frozen=True)
class Admit:
    flow_run_id: UUID
    gpus: tuple[int, ...]
    reason: str
    batch: int | None = None  # a reduced batch (policy switch allow_reduced_batch)


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
    snapshot: Snapshot | None = None  # what `decide` saw (the queue board estimates from it)
    views: dict[str, SegmentView] = field(default_factory=dict)  # segment id -> its view


def schedule(inventory: list[GpuInfo], running: list[SegmentView], pending: list[SegmentView],
             reserved: dict[UUID, tuple[int, ...]], started_at: dict[UUID, float], now: float,
             worker_policy: WorkerPolicy, asked: set[UUID] | None = None,
             usage_tu: dict[str, float] | None = None,
             ledger: usage_state.UsageState | None = None,
             nodes: dict[int, str] | None = None,
             held: dict[int, str] | None = None) -> WorkerDecision:
    """`ledger` (usage from the segment runs' records, `work_pools.usage`) feeds fair share,
    quotas, the 70% rule and aging; without it the policy sees no usage history. `nodes`
    maps each GPU index to its node (the pool scheduler numbers GPUs across nodes); `held`
    maps a GPU index to the job an exited victim freed it for."""
    from work_pools.policy.decide import decide

    snapshot = build_snapshot(inventory, running, pending, reserved, started_at, asked or set(),
                              usage_tu or {}, ledger=ledger, now=now,
                              policy=worker_policy.policy, nodes=nodes, grace=worker_policy)
    if held:
        snapshot = replace(snapshot, held={((nodes or {}).get(i, LOCAL_NODE), i): job
                                           for i, job in held.items()})
    decision = decide(snapshot, worker_policy.policy, now)
    by_id = {str(v.flow_run_id): v for v in (*running, *pending)}
    return WorkerDecision(
        admit=tuple(Admit(by_id[a.segment_id].flow_run_id, a.gpu_indices, a.reason, a.batch)
                    for a in decision.admit),
        preempt=tuple(Stop(by_id[p.segment_id].flow_run_id, p.by_job_id, p.reason)
                      for p in decision.preempt),
        waiting={by_id[k].flow_run_id: v for k, v in decision.waiting.items() if k in by_id},
        raw=decision, snapshot=snapshot, views=by_id,
    )


def build_snapshot(inventory: list[GpuInfo], running: list[SegmentView], pending: list[SegmentView],
                   reserved: dict[UUID, tuple[int, ...]], started_at: dict[UUID, float],
                   asked: set[UUID], usage_tu: dict[str, float],
                   ledger: usage_state.UsageState | None = None, now: float | None = None,
                   policy: Policy | None = None, nodes: dict[int, str] | None = None,
                   grace: WorkerPolicy | None = None) -> Snapshot:
    """Free memory = declared/NVML total minus what admitted segments were estimated to use.
    `grace` (with `now`) bounds how long a segment past its last epoch counts as stopping
    (`finishing`); without it, it does until its process exits."""
    used: dict[int, float] = {}
    for view in running:
        for index in reserved.get(view.flow_run_id, ()):
            used[index] = used.get(index, 0.0) + view.est_mem_gb
    node_of = nodes or {}
    gpus = tuple(_gpu(g, used.get(g.index, 0.0), node_of.get(g.index, LOCAL_NODE)) for g in inventory)
    speed_of = {g.index: g.speed for g in gpus}
    history = _History(ledger, now, policy or Policy())
    run_segments = []
    for v in running:
        indices, started = reserved.get(v.flow_run_id, ()), started_at.get(v.flow_run_id, v.queued_at)
        speed = min((speed_of.get(i, 1.0) for i in indices), default=1.0)
        stopping = v.flow_run_id in asked or finishing(v, started, speed, now, grace)
        run_segments.append(_running_segment(v, indices, started, stopping, history, node_of,
                                             speed_of))
    wait_segments = tuple(_segment(v, (), None, False, history, node_of) for v in pending)
    if ledger is None:
        return Snapshot(gpus=gpus, running=tuple(run_segments), waiting=wait_segments,
                        team_usage_tu=usage_tu)
    return Snapshot(gpus=gpus, running=tuple(run_segments), waiting=wait_segments,
                    team_usage_tu={**ledger.usage.decayed_tu, **usage_tu},
                    team_period_tu=usage_state.period_spend(ledger, history.now, history.policy))


@dataclass(frozen=True)
class _History:
    """What the ledger knows about one job, at `now`."""

    ledger: usage_state.UsageState | None
    now: float | None
    policy: Policy

    def held_window_s(self, job_id: str) -> float:
        if self.ledger is None or self.now is None:
            return 0.0
        return usage_state.held_window_s(self.ledger, job_id, self.now,
                                          self.policy.long_job_window_s)

    def attained_gpu_s(self, job_id: str) -> float:
        return usage_state.attained_gpu_s(self.ledger, job_id) if self.ledger else 0.0

    def last_held_at(self, job_id: str) -> float | None:
        return usage_state.last_held_at(self.ledger, job_id) if self.ledger else None

    def held_since(self, job_id: str, started: float) -> float:
        """Start of the job's uninterrupted hold: back across segment boundaries that left
        the GPU for less than HOLD_GAP_S (a time slice, not a real wait)."""
        usage = self.ledger.jobs.get(job_id) if self.ledger else None
        since = started
        for start, end in reversed(usage.held if usage else ()):
            if start < since and end >= since - HOLD_GAP_S:
                since = start
        return since


def _gpu(info: GpuInfo, used_gb: float, node: str = LOCAL_NODE) -> Gpu:
    speed = gpu_speed(info)
    free = info.mem_total_gb - used_gb if not info.is_real else min(info.mem_free_gb,
                                                                    info.mem_total_gb - used_gb)
    return Gpu(index=info.index, name=info.name, mem_total_gb=info.mem_total_gb,
               mem_free_gb=max(0.0, free), speed=speed, uuid=info.uuid, node=node)


def gpu_speed(info: GpuInfo) -> float:
    """Relative speed (the TU rate): catalog speed, CPU speed for a declared slot."""
    if not info.is_real:
        return gpu_catalog.CPU_SLOT.speed
    return gpu_catalog.device_speed(info.name)  # an unlisted card: documented default, warned once


def _segment(view: SegmentView, gpu_indices: tuple[int, ...], started: float | None,
             stopping: bool, history: _History, node_of: dict[int, str] | None = None) -> Segment:
    """A resumed job keeps its checkpoint's batch (exactness): no memory model for reducing it."""
    remaining_epochs = max(0, view.epochs - view.progress_epoch)
    submitted = submitted_at(view)
    resumed = view.epochs_done > 0 or started is not None
    node = (node_of or {}).get(gpu_indices[0], LOCAL_NODE) if gpu_indices else LOCAL_NODE
    return Segment(
        id=str(view.flow_run_id), job_id=view.job_id, team=view.team, tier=view.tier,
        submitted_at=submitted, waiting_since=waiting_since(submitted, history.last_held_at(view.job_id)),
        est_mem_gb=view.est_mem_gb, job_class=view.job_class,
        est_remaining_s=max(1.0, remaining_epochs * view.est_epoch_s),
        epoch=view.progress_epoch, epochs=view.epochs, gpu_indices=gpu_indices,
        started_at=started, last_checkpoint_at=view.checkpoint_at, stopping=stopping,
        attained_gpu_s=history.attained_gpu_s(view.job_id),
        held_window_s=history.held_window_s(view.job_id), node=node, batch=view.batch,
        fixed_mem_gb=view.fixed_mem_gb, mem_per_image_gb=0.0 if resumed else view.mem_per_image_gb)


def past_last_epoch(view: SegmentView) -> bool:
    """The segment has checkpointed its last epoch and is finalising or exiting: its GPUs free
    on their own, so it counts as stopping (for nobody). Asking it to stop would gain nothing,
    and counting it as running made a waiting job preempt a second victim (the 60-job load
    test saw a segment asked 23 ms before it completed, 4 s after its last epoch). For how
    long it counts so: `finishing`."""
    return 0 < view.stop_after_epoch <= view.progress_epoch


def finishing(view: SegmentView, started: float | None, speed: float, now: float | None,
              grace: WorkerPolicy | None) -> bool:
    """Past its last epoch (`past_last_epoch`) and still within its grace since that last
    checkpoint: counted as stopping, its GPUs kept for whoever waits. A segment that has not
    exited within the grace a victim gets (its process stopped or hung in its final upload)
    counts as running again: a job that waited for its GPU would otherwise wait for good with
    nobody asked to stop (an urgent job stalled behind a frozen segment in the cluster test)."""
    if not past_last_epoch(view):
        return False
    last = view.checkpoint_at
    if grace is None or now is None or last is None:
        return True
    return now - last <= grace.grace_for(epoch_time_here(started, view, speed))


def _running_segment(view: SegmentView, gpu_indices: tuple[int, ...], started: float,
                     stopping: bool, history: _History, node_of: dict[int, str],
                     speed_of: dict[int, float]) -> Segment:
    """A running segment, with how long its job has held a GPU without a real break, its
    measured epoch time scaled to speed 1.0 (what SRPT orders by once an epoch ended) and,
    when stopping, the job it stops for (its GPUs are kept for that job)."""
    seg = _segment(view, gpu_indices, started, stopping, history, node_of)
    speed = min((speed_of.get(i, 1.0) for i in gpu_indices), default=1.0)
    done = view.progress_epoch - view.epochs_done
    measured = epoch_time_here(started, view, speed) * speed if done > 0 else None
    return replace(seg, held_since=history.held_since(view.job_id, started),
                   stopping_for=view.labels.get(PREEMPTED_BY_LABEL, "") if stopping else "",
                   measured_epoch_s=measured,  # its memory model: soft preemption may shrink it
                   mem_per_image_gb=view.mem_per_image_gb)


def submitted_at(view: SegmentView) -> float:
    """The job's submit time (the plan's `submitted_at`), else when the segment was queued."""
    value = getattr(view, "submitted_at", None)
    return float(value) if value else view.queued_at


def waiting_since(submitted: float, last_held: float | None) -> float:
    """Aging counts continuous waiting: since the job last held a GPU, or since its submission."""
    return max(submitted, last_held) if last_held is not None else submitted

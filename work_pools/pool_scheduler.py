"""The pool's one scheduler: sees every node, decides once for the whole pool.

Run by whichever node agent holds the scheduler lease (`work_pools.lease`). Each
pass it reads what Prefect knows (live node records, every open segment run of
the pool, usage from finished runs), asks the pure `decide` for one Decision over
all GPUs, and writes the outcome back into Prefect as labels on the runs:

- admit: `yoloq.node`, `yoloq.gpus` (the node's local indices), `yoloq.gpu_name`,
  `yoloq.gpu_speed`, `yoloq.assigned_at`, and `yoloq.batch` for a reduced batch.
  The node named there starts the run; no other node touches it.
- preempt: `yoloq.preempt=requested` (+ who, why, when) on the victim, wherever it
  runs; the victim stops at its next epoch boundary, and its own node enforces the
  grace. A request whose label could not be set is decided again next pass.
- throttle (soft preemption): the victim is asked to stop like a preempted one, with
  `yoloq.throttle=<batch>` and `yoloq.throttle_gpu=<node>:<index>`; its job queues the
  next segment at once with that batch, and that segment is placed back on the shared GPU
  beside the job it made room for whenever the declared memory holds both.
- one consistent snapshot: a node whose last record predates the leader's last change on
  it (`nodes.report_is_fresh`) has not shown that change yet; until it reports again no
  segment is admitted onto its GPUs and no victim is chosen anywhere (`settled`): a
  victim chosen on half-updated reports was once the wrong one. The wait is one heartbeat.
- drain: runs assigned to a node whose heartbeat lapsed are put back in the queue
  (not yet started) or marked Crashed (started): their jobs resume elsewhere from
  the shared checkpoint store.

An urgent job is seen from its submission (`work_pools.announce`): until its first segment
exists, its parent's announced plan stands in for it, so a victim is asked at once; the stand-in
is never admitted.

A GPU is the pair (node, local index). `decide` sees one flat index space,
numbered node by node; the mapping is kept here and never leaves this module.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from work_pools.announce import announced_views
from work_pools.holds import StopHolds
from work_pools.inventory import GpuInfo
from work_pools.nodes import NodeRecord, heartbeat_every_s, report_is_fresh
from work_pools.scheduling import Admit, WorkerDecision, WorkerPolicy, gpu_speed, schedule
from work_pools.segments import PREEMPTED_BY_LABEL, SegmentView, segment_job_id, segment_view
from work_pools.usage import (BATCH_LABEL, GPU_NAME_LABEL, GPUS_LABEL, NODE_LABEL, SPEED_LABEL,
                              SegmentInterval, UsageBook, ledger_state)
from yoloq.base.histogram import DECIDE_BUCKETS, CumulativeHistogram
from yoloq.base.names import JOBS_POOL
from yoloq.domain.contract import (ADMIT_REASON_LABEL, ASSIGNED_AT_LABEL, PREEMPT_ASKED_AT_LABEL,
                                   PREEMPT_LABEL, PREEMPT_REASON_LABEL, PREEMPT_REQUESTED,
                                   THROTTLE_GPU_LABEL, THROTTLE_LABEL, plan_of, preemption_requested)



@dataclass(frozen=True)
class PoolGpus:
    """The pool's GPUs in one flat index space: global index <-> (node, local index)."""

    gpus: tuple[GpuInfo, ...]  # re-indexed globally
    where: dict[int, tuple[str, int]]
    index_of: dict[tuple[str, int], int]

    @classmethod
    def of(cls, nodes: list[NodeRecord]) -> "PoolGpus":
        gpus, where, index_of = [], {}, {}
        for node in sorted(nodes, key=lambda n: n.name):
            for gpu in sorted(node.gpus, key=lambda g: g.index):
                i = len(gpus)
                gpus.append(replace(gpu, index=i))
                where[i] = (node.name, gpu.index)
                index_of[(node.name, gpu.index)] = i
        return cls(tuple(gpus), where, index_of)

    def node_of(self, indices: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        pairs = [self.where[i] for i in indices]
        nodes = {n for n, _ in pairs}
        if len(nodes) != 1:
            raise ValueError(f"GPUs {indices} span nodes {sorted(nodes)}")
        return pairs[0][0], tuple(i for _, i in pairs)


@dataclass
class PassResult:
    decision: WorkerDecision | None
    assigned: dict[UUID, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    drained: list[UUID] = field(default_factory=list)
    running: list[SegmentView] = field(default_factory=list)
    decide_s: float = 0.0


def assignment(run: Any) -> tuple[str, tuple[int, ...]] | None:
    """(node, local GPU indices) the scheduler gave this run, or None."""
    labels = run.labels or {}
    node, gpus = labels.get(NODE_LABEL), labels.get(GPUS_LABEL)
    if not node or not gpus:
        return None
    return str(node), tuple(int(g) for g in str(gpus).split(",") if g.strip())


class PoolScheduler:
    """The leader's state between passes: usage cache, notified quota breaches, pass timings."""

    def __init__(self, pool: str, jobs_pool: str = JOBS_POOL) -> None:
        self.pool, self.jobs_pool = pool, jobs_pool  # jobs_pool: where urgent jobs are announced
        self.usage = UsageBook(pool)
        self.notified: dict[str, float] = {}
        self.holds = StopHolds()
        self.changed_at: dict[str, float] = {}  # node -> when this leader last changed a run there
        self.unsettled_since: float | None = None  # since when some node has been unsettled
        # (pass s, decide s, admits, preempts, when the pass ended)
        self.timings: deque[tuple[float, float, int, int, float]] = deque(maxlen=2000)
        self.decide_histogram = CumulativeHistogram(DECIDE_BUCKETS)  # since this leader began
        self.pass_histogram = CumulativeHistogram(DECIDE_BUCKETS)

    def stats(self) -> dict[str, Any]:
        """Pass and decide time percentiles over the recent passes (published by the leader),
        and how many decision passes a second the leader made over them."""
        histograms = {"decide_histogram": self.decide_histogram.to_dict(),
                      "pass_histogram": self.pass_histogram.to_dict()}
        if not self.timings:
            return {"passes": 0, **histograms}
        passes = sorted(t[0] for t in self.timings)
        decides = sorted(t[1] for t in self.timings)
        pick = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
        window = self.timings[-1][4] - self.timings[0][4]
        return {"passes": len(self.timings), "pass_ms_p50": round(1000 * pick(passes, 0.5), 2),
                "pass_ms_p95": round(1000 * pick(passes, 0.95), 2),
                "decide_ms_p50": round(1000 * pick(decides, 0.5), 3),
                "decide_ms_p95": round(1000 * pick(decides, 0.95), 3),
                "window_s": round(window, 1),
                "passes_per_s": round((len(self.timings) - 1) / window, 3) if window > 0 else None,
                "admitted": sum(t[2] for t in self.timings),
                "preempted": sum(t[3] for t in self.timings), **histograms}

    async def run_pass(self, client: Any, nodes: list[NodeRecord], policy: WorkerPolicy,
                       now: float | None = None) -> PassResult:
        now = now or time.time()
        started = time.perf_counter()
        live = [n for n in nodes if n.alive(now)]
        live_names = {n.name for n in live}
        # Announcements first: a parent clears its label only once its segment exists, so a
        # job whose label is gone by now has its segment among the open runs read next.
        announcing = await announced_views(client, self.jobs_pool, now)
        open_runs = await _open_runs(client, self.pool)
        exiting = await _exiting_runs(client, live, {r.id for r in open_runs})
        result = PassResult(decision=None)
        result.drained = await _drain(client, open_runs, live_names, nodes, now)
        pool_gpus = PoolGpus.of(live)
        occupying, pending = split_open_runs(open_runs + exiting, live_names, result.drained, now)
        intervals = await self.usage.refresh(client, now, open_runs)
        had_segments = {segment_job_id(r) for r in open_runs + exiting} | {iv.job_id for iv in intervals}
        announced = [v for v in announcing if v.job_id not in had_segments]
        waiting_jobs = {segment_job_id(r) for r in pending} | {v.job_id for v in announced}
        held = self.holds.current((str(r.id) for r in occupying), waiting_jobs, now)
        plan = plan_pass(pool_gpus, occupying, pending, intervals, policy, now, self.notified,
                         extra_pending=tuple(announced),
                         held={pool_gpus.index_of[g]: job for g, job in held.items()
                               if g in pool_gpus.index_of})
        if plan.decision.snapshot is not None:
            self.holds.observe(plan.decision.snapshot.running, pool_gpus.where)
        decision = without_admits(plan.decision, {v.flow_run_id for v in announced})
        views, reserved = plan.views, plan.reserved
        result.decide_s = plan.decide_s
        result.decision, result.running = decision, [views[r.id] for r in occupying]
        rejoin = _rejoin_shared_gpu(pending, decision, pool_gpus, views, reserved)
        unsettled = self._unsettled(live, now)
        decision, admits = settled(decision, decision.admit + rejoin, unsettled, pool_gpus)
        result.decision = decision
        result.assigned = await _apply_admissions(client, admits, pool_gpus, now)
        await _apply_preemptions(client, decision, views, now)
        await _apply_throttles(client, decision, pool_gpus, now)
        self._changed(result.assigned, decision, reserved, pool_gpus)
        pass_s = time.perf_counter() - started
        self.decide_histogram.observe(result.decide_s)
        self.pass_histogram.observe(pass_s)
        self.timings.append((pass_s, result.decide_s, len(decision.admit),
                             len(decision.preempt), time.time()))
        return result


    def _unsettled(self, live: list[NodeRecord], now: float) -> set[str]:
        """Nodes whose record predates this leader's last change there. Changes on one node
        after another could keep some node unsettled for good: after two heartbeat periods
        of that, the pass decides anyway (a bounded wait for urgent work, never a stall)."""
        unsettled = {n.name for n in live if not report_is_fresh(n, self.changed_at.get(n.name), now)}
        if not unsettled:
            self.unsettled_since = None
            return unsettled
        if self.unsettled_since is None:
            self.unsettled_since = now
        if now - self.unsettled_since >= 2 * heartbeat_every_s():
            self.unsettled_since = None
            return set()
        return unsettled

    def _changed(self, assigned: dict[UUID, tuple[str, tuple[int, ...]]],
                 decision: WorkerDecision, reserved: dict[UUID, tuple[int, ...]],
                 pool_gpus: PoolGpus) -> None:
        """Remember when this pass changed a run on each node (after the writes: a record
        published since then has seen them)."""
        at = time.time()
        touched = {node for node, _ in assigned.values()}
        for stop in decision.preempt:
            touched.update(pool_gpus.where[i][0] for i in reserved.get(stop.flow_run_id, ())
                           if i in pool_gpus.where)
        touched.update(pool_gpus.where[t.gpu_index][0] for t in decision.raw.throttle
                       if t.gpu_index in pool_gpus.where)
        for node in touched:
            self.changed_at[node] = at


UNSETTLED_WAITING = "waiting: node {node} has not reported since the scheduler's last change there"
UNSETTLED_PREEMPT = "waiting: a node has not reported since the scheduler's last change; victims are chosen once it has"


def settled(decision: WorkerDecision, admits: tuple[Admit, ...], unsettled: set[str],
            pool_gpus: PoolGpus) -> tuple[WorkerDecision, tuple[Admit, ...]]:
    """The part of a decision that rests only on reports newer than the leader's last change:
    no admission onto a node in `unsettled`, and, while any node is unsettled, no preemption
    or throttle at all (the victim is chosen across all nodes, on one consistent view).
    Returns (the decision, the admissions to apply)."""
    if not unsettled:
        return decision, admits
    waiting = dict(decision.waiting)
    kept = []
    for admit in admits:
        node = pool_gpus.where[admit.gpus[0]][0]
        if node in unsettled:
            waiting[admit.flow_run_id] = UNSETTLED_WAITING.format(node=node)
        else:
            kept.append(admit)
    by_job = {str(v.job_id): v.flow_run_id for v in decision.views.values()}
    for stop in decision.preempt:
        run = by_job.get(stop.by_job)
        if run is not None:
            waiting[run] = UNSETTLED_PREEMPT
    kept_ids = {a.flow_run_id for a in kept}
    raw_kept = tuple(a for a in decision.raw.admit
                     if decision.views[a.segment_id].flow_run_id in kept_ids)
    raw = replace(decision.raw, admit=raw_kept, preempt=(), throttle=())
    return replace(decision, admit=tuple(a for a in decision.admit if a.flow_run_id in kept_ids),
                   preempt=(), waiting=waiting, raw=raw), tuple(kept)


STAND_IN_WAITING = "announced: the GPU is kept for it while its parent queues its first segment"


def without_admits(decision: WorkerDecision, stand_ins: set[UUID]) -> WorkerDecision:
    """The decision with no admission of an announced job: it has no run to start yet (its
    GPU stays free for it, and the hold keeps it once its segment arrives). The board and the
    ETA tracker read `raw`: there too the stand-in waits rather than starts."""
    if not stand_ins:
        return decision
    ids = {str(i) for i in stand_ins}
    dropped = [a.segment_id for a in decision.raw.admit if a.segment_id in ids]
    raw = replace(decision.raw, admit=tuple(a for a in decision.raw.admit if a.segment_id not in ids),
                  waiting={**decision.raw.waiting, **{i: STAND_IN_WAITING for i in dropped}})
    return replace(decision, raw=raw,
                   admit=tuple(a for a in decision.admit if a.flow_run_id not in stand_ins),
                   waiting={**decision.waiting, **{UUID(i): STAND_IN_WAITING for i in dropped}})


@dataclass
class PassPlan:
    """What one pass would do over a snapshot of the pool (nothing written yet)."""

    decision: WorkerDecision
    views: dict[UUID, SegmentView]
    reserved: dict[UUID, tuple[int, ...]]
    decide_s: float


def plan_pass(pool_gpus: PoolGpus, occupying: list[Any], pending: list[Any],
              intervals: list[SegmentInterval], policy: WorkerPolicy, now: float,
              notified: dict[str, float] | None = None,
              extra_pending: tuple[SegmentView, ...] = (),
              held: dict[int, str] | None = None) -> PassPlan:
    """The pool's decision over these runs, read-only: the leader's pass applies it, the
    API's provisional ETA (`extra_pending`: a job not queued yet) only reads it. `held`:
    GPU index -> the job an exited victim freed it for (`work_pools.holds`)."""
    views = {r.id: _with_job_batch(segment_view(r), r, intervals) for r in occupying + pending}
    reserved = {r.id: global_indices(pool_gpus, assignment(r)) for r in occupying}
    started_at = {r.id: started_at_of(r, now) for r in occupying}
    asked = {r.id for r in occupying if preemption_requested(r)
             or (r.state is not None and r.state.is_final())}
    ledger = ledger_state(intervals, now, policy.policy, notified)
    tick = time.perf_counter()
    decision = schedule(list(pool_gpus.gpus), [views[r.id] for r in occupying],
                        [*(views[r.id] for r in pending), *extra_pending], reserved, started_at,
                        now, policy, asked=asked, ledger=ledger,
                        nodes={i: node for i, (node, _) in pool_gpus.where.items()}, held=held)
    return PassPlan(decision, views, reserved, time.perf_counter() - tick)


async def _open_runs(client: Any, pool: str) -> list[Any]:
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    from work_pools.usage import _runs

    return await _runs(client, pool, FlowRunFilter(state=FlowRunFilterState(
        type=FlowRunFilterStateType(any_=[StateType.SCHEDULED, StateType.PENDING,
                                          StateType.RUNNING, StateType.CANCELLING]))))


async def _exiting_runs(client: Any, live: list[NodeRecord], open_ids: set[UUID]) -> list[Any]:
    """Runs already final whose processes are still alive on a node: their GPUs stay busy."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    ids = {UUID(r) for n in live for r in n.live_runs} - open_ids
    if not ids:
        return []
    return await client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(ids))))


def split_open_runs(runs: list[Any], live_names: set[str], drained: list[UUID],
           now: float) -> tuple[list[Any], list[Any]]:
    """(runs holding GPUs on a live node, runs waiting for a decision)."""
    occupying, pending = [], []
    skip = set(drained)
    for run in runs:
        if run.id in skip:
            continue
        where = assignment(run)
        if where is not None and where[0] in live_names:
            occupying.append(run)
        elif where is None and run.state is not None and run.state.is_scheduled():
            start = run.expected_start_time or run.next_scheduled_start_time
            if start is None or start.timestamp() <= now + 1.0:
                pending.append(run)
    return occupying, pending


def _with_job_batch(view: SegmentView, run: Any,
                    intervals: list[SegmentInterval]) -> SegmentView:
    """The batch a segment really trains at: its own reduced batch once admitted, else for a
    resumed job the reduced batch of its earlier segments (the checkpoint's batch)."""
    own = (run.labels or {}).get(BATCH_LABEL)
    batch = int(own) if own else None
    if batch is None and view.epochs_done > 0:
        earlier = [iv for iv in intervals if iv.job_id == view.job_id and iv.batch]
        batch = max(earlier, key=lambda iv: iv.start).batch if earlier else None
    if batch is None or batch == view.batch:
        return view
    mem = view.fixed_mem_gb + batch * view.mem_per_image_gb if view.mem_per_image_gb else view.est_mem_gb
    return replace(view, batch=batch, est_mem_gb=mem)


def global_indices(pool_gpus: PoolGpus, where: tuple[str, tuple[int, ...]] | None) -> tuple[int, ...]:
    if where is None:
        return ()
    node, local = where
    return tuple(pool_gpus.index_of[(node, i)] for i in local if (node, i) in pool_gpus.index_of)


def started_at_of(run: Any, now: float) -> float:
    if run.start_time is not None:
        return run.start_time.timestamp()
    value = (run.labels or {}).get(ASSIGNED_AT_LABEL)
    return float(value) if value else now


async def _drain(client: Any, runs: list[Any], live_names: set[str], nodes: list[NodeRecord],
                 now: float) -> list[UUID]:
    """Runs assigned to a lost node: back to the queue, or Crashed when they had started."""
    drained = []
    for run in runs:
        where = assignment(run)
        if where is None or where[0] in live_names:
            continue
        node = where[0]
        if run.state is not None and run.state.is_scheduled():
            await client.update_flow_run_labels(run.id, {NODE_LABEL: "", GPUS_LABEL: ""})
        else:
            await _crash(client, run.id, _lost_message(node, nodes, now))
        drained.append(run.id)
    return drained


def _lost_message(node: str, nodes: list[NodeRecord], now: float) -> str:
    record = next((n for n in nodes if n.name == node), None)
    silent = f"no heartbeat for {now - record.heartbeat_at:.0f} s" if record else "never registered"
    return (f"Node {node} lost ({silent}); the segment was drained and its job resumes "
            "from its last checkpoint on another node.")


async def _crash(client: Any, flow_run_id: UUID, message: str) -> None:
    from prefect.states import Crashed

    await client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)


async def _apply_admissions(client: Any, admits: tuple[Admit, ...], pool_gpus: PoolGpus,
                            now: float) -> dict[UUID, tuple[str, tuple[int, ...]]]:
    assigned = {}
    for admit in admits:
        node, local = pool_gpus.node_of(admit.gpus)
        first = pool_gpus.gpus[admit.gpus[0]]
        labels = {NODE_LABEL: node, GPUS_LABEL: ",".join(str(i) for i in local),
                  GPU_NAME_LABEL: first.name, SPEED_LABEL: f"{gpu_speed(first):.4f}",
                  ASSIGNED_AT_LABEL: f"{now:.3f}", ADMIT_REASON_LABEL: admit.reason[:200]}
        if admit.batch:
            labels[BATCH_LABEL] = str(admit.batch)
        await client.update_flow_run_labels(admit.flow_run_id, labels)
        assigned[admit.flow_run_id] = (node, local)
    return assigned


async def _apply_preemptions(client: Any, decision: WorkerDecision,
                             views: dict[UUID, SegmentView], now: float) -> None:
    from yoloq.records.events import emit_preemption

    for stop in decision.preempt:
        await client.update_flow_run_labels(stop.flow_run_id, {
            PREEMPT_LABEL: PREEMPT_REQUESTED, PREEMPTED_BY_LABEL: stop.by_job,
            PREEMPT_REASON_LABEL: stop.reason[:200], PREEMPT_ASKED_AT_LABEL: f"{now:.3f}"})
        emit_preemption(views.get(stop.flow_run_id), stop.by_job, stop.reason)


async def _apply_throttles(client: Any, decision: WorkerDecision, pool_gpus: PoolGpus,
                           now: float) -> None:
    """Soft preemption: stop the victim at its next boundary like a preempted one, labelled
    with the batch its next segment trains with and the GPU it goes back to."""
    from yoloq.records.events import emit_preemption

    for throttle in decision.raw.throttle:
        view = decision.views.get(throttle.victim_segment_id)
        if view is None:
            continue
        node, local = pool_gpus.where[throttle.gpu_index]
        await client.update_flow_run_labels(view.flow_run_id, {
            PREEMPT_LABEL: PREEMPT_REQUESTED, PREEMPTED_BY_LABEL: throttle.for_job_id,
            PREEMPT_REASON_LABEL: throttle.reason[:200], PREEMPT_ASKED_AT_LABEL: f"{now:.3f}",
            THROTTLE_LABEL: str(throttle.new_batch), THROTTLE_GPU_LABEL: f"{node}:{local}"})
        emit_preemption(view, throttle.for_job_id, throttle.reason)


def _rejoin_shared_gpu(pending: list[Any], decision: WorkerDecision, pool_gpus: PoolGpus,
                       views: dict[UUID, SegmentView],
                       reserved: dict[UUID, tuple[int, ...]]) -> tuple[Admit, ...]:
    """A throttled job's next segment goes back onto the GPU it shares (its plan's
    `throttle_gpu`) while only the job it made room for is there and the declared memory
    holds both: the Throttle `decide` made, carried across the victim's restart."""
    held: dict[int, list[SegmentView]] = {}
    for run_id, indices in [*reserved.items(), *((a.flow_run_id, a.gpus) for a in decision.admit)]:
        for i in indices:
            held.setdefault(i, []).append(views[run_id])
    admitted = {a.flow_run_id for a in decision.admit}
    rejoined = []
    for run in pending:
        plan = plan_of(run)
        node, _, local = plan.throttle_gpu.rpartition(":")
        i = pool_gpus.index_of.get((node, int(local))) if local.isdigit() else None
        if i is None or run.id in admitted:
            continue
        view, there = views[run.id], held.get(i, [])
        free = pool_gpus.gpus[i].mem_total_gb - sum(v.est_mem_gb for v in there)
        if not there or {v.job_id for v in there} != {plan.throttle_for} or free < view.est_mem_gb:
            continue
        reason = (f"shares GPU {local} with job {plan.throttle_for} (soft preemption, "
                  f"batch {plan.throttle_batch})")
        rejoined.append(Admit(run.id, (i,), reason, plan.throttle_batch or None))
        held[i] = [*there, view]
    return tuple(rejoined)

"""The `yolo-gpu` worker: the node agent of one GPU host, and the pool's scheduler when
it holds the lease.

A node agent (1) publishes its GPU inventory, a heartbeat and the runs whose processes
are alive (`work_pools.nodes`), from its own task: every few seconds and whenever a
process starts or exits, so no pass waits on that write. Every poll, (2) if it holds the pool's scheduler
lease (`work_pools.lease`), decides for every node of the pool
(`work_pools.pool_scheduler`) and publishes the one queue board; (3) starts the
segments the scheduler assigned to this node, on the GPUs assigned, as processes with
`CUDA_VISIBLE_DEVICES`; (4) kills its own victims that overstayed their grace and its
own runs that someone else marked Crashed. A GPU is released only after its
segment's process has exited.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional
from uuid import UUID

import anyio
from pydantic import Field
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.workers.base import (
    BaseJobConfiguration,
    BaseVariables,
    BaseWorker,
    BaseWorkerResult,
)

from work_pools import events_wake, nodes, processes
from work_pools.announce import urgent_job_submitted
from work_pools.inventory import GpuInfo, inventory
from work_pools.lease import SchedulerLease, keep_renewed, lease_seconds, publish_stats
from work_pools.pool_scheduler import PassResult, PoolScheduler, assignment
from work_pools.scheduling import WorkerPolicy, epoch_time_here, gpu_speed
from work_pools.segments import SegmentView, segment_view
from work_pools.usage import BATCH_LABEL
from work_pools.warm_start import SegmentStarter
from yoloq.base.stores import PREEMPT_LABEL, REDUCED_BATCH_ENV
from yoloq.settings import settings


POLICY_REFRESH_S = settings().policy_refresh_s
ORPHAN_CHECK_S = 5.0
STATS_EVERY_S = 10.0  # the leader publishes pass/decide timings this often


class YoloGpuJobConfiguration(BaseJobConfiguration):
    working_dir: Optional[Path] = Field(default=None)
    stream_output: bool = Field(default=True)
    grace_seconds: Optional[float] = Field(default=None)


class YoloGpuVariables(BaseVariables):
    working_dir: Optional[Path] = Field(
        default=None, title="Working directory",
        description="Folder the segment process starts in (the project root, so the "
                    "flow entrypoint imports). Defaults to the worker's current folder.")
    stream_output: bool = Field(
        default=True, description="Copy the segment's stdout/stderr to the worker's log.")
    grace_seconds: Optional[float] = Field(
        default=None, title="Preemption grace (s)",
        description="How long a preemption victim may take to reach its next epoch boundary "
                    "before it is killed. Default: max(60 s, 2 x the estimated epoch time).")


class YoloGpuWorkerResult(BaseWorkerResult):
    """Exit status of one segment process."""


class YoloGpuWorker(BaseWorker[YoloGpuJobConfiguration, YoloGpuVariables, YoloGpuWorkerResult]):
    type = "yolo-gpu"
    job_configuration = YoloGpuJobConfiguration
    job_configuration_variables = YoloGpuVariables
    _description = ("A node agent for one GPU host: runs the YOLO training segments the pool's "
                    "scheduler assigns to it and stops its own victims at epoch boundaries; "
                    "whichever agent holds the scheduler lease decides for the whole pool.")
    _display_name = "YOLO GPU"
    _documentation_url = "https://github.com/yoloq/yoloq#the-yolo-gpu-worker"
    _logo_url = "https://raw.githubusercontent.com/PrefectHQ/prefect/main/docs/images/logos/prefect-logo-mark.svg"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_name = nodes.default_node_name(kwargs.get("name"))
        self._gpus: list[GpuInfo] = []
        self._policy = WorkerPolicy.from_env()
        self._policy_read_at = time.time()
        self._lease = SchedulerLease(pool=self._work_pool_name, holder=self.node_name,
                                     duration_s=lease_seconds())
        self._scheduler = PoolScheduler(self._work_pool_name)
        self._reserved: dict[UUID, tuple[int, ...]] = {}   # local GPUs, until the process exits
        self._views: dict[UUID, SegmentView] = {}
        self._started_at: dict[UUID, float] = {}
        self._pids: dict[UUID, int] = {}
        self._asked: dict[UUID, float] = {}                  # own victim -> when it was asked
        self._cancelling: dict[UUID, float] = {}             # cancelled by a user -> first seen
        self._batches: dict[UUID, int] = {}                  # admitted with a reduced batch
        self._orphans_checked_at = 0.0
        self._stats_at = 0.0
        self._stopping = False
        self.last_pass: PassResult | None = None
        self.wake = events_wake.WakeStats()
        self._waker = events_wake.PassWaker(self.get_and_submit_flow_runs)
        self._heartbeat_due: anyio.Event | None = None
        self._reporting = False
        self.heartbeats = 0

    @property
    def is_leader(self) -> bool:
        return self._lease.lease_id is not None

    async def setup(self) -> None:
        await super().setup()
        self._starter = SegmentStarter(self._logger)  # the warm launcher (YOLOQ_WARM_START)
        self._gpus = inventory()
        kinds = {g.kind for g in self._gpus}
        self._logger.info("node %s, GPU inventory (%s): %s", self.node_name, "/".join(sorted(kinds)),
                          ", ".join(f"{g.index}:{g.name} {g.mem_total_gb:.0f}GB" for g in self._gpus))
        await self._fail_leftovers()
        await self._heartbeat()
        self._heartbeat_due = anyio.Event()
        self._runs_task_group.start_soon(self._heartbeat_loop)
        self._keeper_stop = anyio.Event()
        self._runs_task_group.start_soon(keep_renewed, self._lease, self.client, self._keeper_stop)
        self._pass_lock = anyio.Lock()
        self._wake_cause: tuple[str, float] | None = None
        if events_wake.enabled():
            self._waker = events_wake.PassWaker(self.get_and_submit_flow_runs, self._logger)
            self._runs_task_group.start_soon(
                self._waker.serve, events_wake.run_state_filter((events_wake.SLOT_FREED,)), self._on_event)

    async def teardown(self, *exc_info: Any) -> None:
        self._stopping = True
        self._waker.stop()
        if getattr(self, "_keeper_stop", None) is not None:
            self._keeper_stop.set()  # the keeper ends; teardown releases the lease below
        self._live_runs_changed()  # wakes the heartbeat loop, which sees _stopping and ends
        await self._stop_all_segments("node agent shutting down")
        if getattr(self, "_starter", None) is not None:
            self._starter.close()
        try:
            await self._lease.release(self.client)
            await nodes.remove(self.client, self.node_name)
        except Exception as exc:
            self._logger.warning("could not leave the pool cleanly: %s", exc)
        await super().teardown(*exc_info)

    # -- one poll, started by the poll loop or by an event -------------------------

    async def get_and_submit_flow_runs(self) -> list[Any]:
        """One pass at a time, whether the poll loop or an event started it."""
        async with self._pass_lock:
            cause, self._wake_cause = self._wake_cause, None
            if cause is None:
                self.wake.poll_passes += 1
            else:
                self.wake.record_event(*cause)
            return await super().get_and_submit_flow_runs()

    def _on_event(self, event: Any) -> None:
        if urgent_job_submitted(event):
            self._kick(event.event, event.occurred.timestamp())
            return
        if not events_wake.in_pool(event, self._work_pool_name):
            return
        if event.event != events_wake.SLOT_FREED and (
                events_wake.state_type(event) not in events_wake.WAKE_TYPES):
            return
        self._kick(event.event, event.occurred.timestamp())

    def _kick(self, cause: str, occurred: float) -> None:
        if not self._waker.serving or self._stopping:
            return
        self._wake_cause = self._wake_cause or (cause, occurred)
        self._waker.kick()


    async def _submit_scheduled_flow_runs(self, flow_run_response: list[Any]) -> list[Any]:
        """Replace Prefect's first-come submission: heartbeat, decide if leader, start ours."""
        if self._stopping:
            return []
        try:
            return await self._poll_once(flow_run_response)
        except Exception:  # a service loop logs a failure and keeps going
            self._logger.exception("node pass failed; retrying at the next poll")
            return []

    async def _poll_once(self, flow_run_response: list[Any]) -> list[Any]:
        now = time.time()
        await self._refresh_own_runs()
        await self._reload_policy(now)
        leading = await self._lease.hold(self.client)
        if leading:
            await self._lead(now)
            flow_run_response = await self._with_fresh_assignments(flow_run_response)
        started = await self._start_assigned(flow_run_response)
        if leading and self.last_pass is not None:
            self._report_soon(self.last_pass, now)
        await self._enforce_grace(time.time())
        await self._enforce_cancellations(time.time())
        await self._mark_orphans(time.time())
        return started

    async def _lead(self, now: float) -> None:
        """Decide for the whole pool (only the lease holder gets here)."""
        records = [r for r in await nodes.read_nodes(self.client, self._work_pool_name)
                   if r.name != self.node_name]
        records.append(self._own_record())  # this node's own, as of now (no write needed)
        result = await self._scheduler.run_pass(self.client, records, self._policy, now)
        self.last_pass = result
        for run_id, (node, gpus) in result.assigned.items():
            self._logger.info("scheduler: %s -> node %s GPU %s", run_id, node, gpus)
        for run_id in result.drained:
            self._logger.warning("scheduler: drained %s from a lost node", run_id)

    def _report_soon(self, result: PassResult, now: float) -> None:
        """Quota notices, the queue board and the stats, in a task of their own: each is a
        write that waits for SQLite's lock under load (7 s seen between an assignment and its
        start when the board came first). One report at a time; a pass during one skips its
        own (the next pass reports the newer decision)."""
        if self._reporting:
            return
        self._reporting = True
        self._runs_task_group.start_soon(self._report, result, now)

    async def _report(self, result: PassResult, now: float) -> None:
        try:
            if result.decision is not None:
                await self._notify_quota_breaches(result.decision, now)
                await self._publish_board(result, now)
            if now - self._stats_at >= STATS_EVERY_S:
                self._stats_at = now
                await publish_stats(self.client, {**self._scheduler.stats(), "holder": self.node_name,
                                                  "at": now, "wake": self.wake.as_dict()})
        except Exception as exc:  # informative: never stop the agent for it
            self._logger.warning("pass report not published (%s)", " ".join(str(exc).split())[:200])
        finally:
            self._reporting = False

    async def _with_fresh_assignments(self, flow_run_response: list[Any]) -> list[Any]:
        """Re-read the runs this pass just assigned to this node, so they start in this pass
        rather than at the next poll (their labels were written after the response was read)."""
        mine = {i for i, (node, _) in (self.last_pass.assigned if self.last_pass else {}).items()
                if node == self.node_name}
        stale = [e for e in flow_run_response if e.flow_run.id in mine and assignment(e.flow_run) is None]
        if not stale:
            return flow_run_response
        fresh = {r.id: r for r in await self.client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[e.flow_run.id for e in stale])))}
        for entry in stale:
            entry.flow_run = fresh.get(entry.flow_run.id, entry.flow_run)
        return flow_run_response

    async def _start_assigned(self, flow_run_response: list[Any]) -> list[Any]:
        """Start the scheduled runs the scheduler assigned to this node (labels on the run)."""
        started = []
        for entry in flow_run_response:
            run = entry.flow_run
            where = assignment(run)
            if where is None or where[0] != self.node_name or run.id in self._reserved:
                continue
            self._reserved[run.id] = where[1]
            batch = (run.labels or {}).get(BATCH_LABEL)
            if batch:
                self._batches[run.id] = int(batch)
            self._views[run.id] = segment_view(run)
            self.get_flow_run_logger(run).info("starting on node %s GPU %s: %s", self.node_name,
                                               where[1], (run.labels or {}).get("yoloq.admit_reason", ""))
            self._runs_task_group.start_soon(self._start_segment, run)
            started.append(run)
        return started

    def _own_record(self) -> nodes.NodeRecord:
        return nodes.make_record(self.node_name, self._gpus, [str(i) for i in self._pids],
                                 pool=self._work_pool_name)

    async def _heartbeat(self) -> None:
        await nodes.publish(self.client, self._own_record())
        self.heartbeats += 1

    async def _heartbeat_loop(self) -> None:
        """Publish the node record every `heartbeat_every_s()` and as soon as a segment
        process starts or exits. On SQLite this upsert waits seconds for the write lock
        under load; in its own task it delays no scheduling pass."""
        while not self._stopping:
            with anyio.move_on_after(nodes.heartbeat_every_s()):
                await self._heartbeat_due.wait()
            self._heartbeat_due = anyio.Event()
            if self._stopping:  # teardown removes the record; a late beat must not restore it
                return
            try:
                await self._heartbeat()
            except Exception as exc:  # the API restarting: the next beat tries again
                self._logger.warning("heartbeat not published (%s)", " ".join(str(exc).split())[:200])

    def _live_runs_changed(self) -> None:
        if self._heartbeat_due is not None:
            self._heartbeat_due.set()

    async def _reload_policy(self, now: float) -> None:
        """Re-read the policy block now and then, so quota and weight changes apply live."""
        if now - self._policy_read_at < POLICY_REFRESH_S:
            return
        self._policy_read_at = now
        policy = await anyio.to_thread.run_sync(WorkerPolicy.from_env)
        if policy != self._policy:
            self._logger.info("scheduling policy changed (%s)", policy.source)
            self._policy = policy

    def _running_views(self) -> list[SegmentView]:
        """Segments running on this node."""
        return [self._views[i] for i in self._reserved if i in self._views]

    async def _start_segment(self, flow_run: Any) -> None:
        """What Prefect's own submission step does for one run (the cancellation observer
        must know the run is in flight, or a user's cancel would never reach it)."""
        self._submitting_flow_run_ids.add(flow_run.id)
        if self._cancelling_observer is not None:
            self._cancelling_observer.add_in_flight_flow_run_id(flow_run.id)
        try:
            await self._submit_run(flow_run)
        finally:
            self._submitting_flow_run_ids.discard(flow_run.id)
            if flow_run.id not in self._pids:  # never started (e.g. cancelled meanwhile)
                self._release(flow_run.id)

    async def _refresh_own_runs(self) -> None:
        """Read the runs on this node: progress labels, preemption requests, cancels, and
        whether someone else marked a run Crashed (a drain): then its process must go."""
        ids = [i for i in self._reserved if i in self._views]
        if not ids:
            return
        runs = await self.client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        for run in runs:
            self._views[run.id] = segment_view(run)
            labels = run.labels or {}
            if labels.get(PREEMPT_LABEL) == "requested" and run.id not in self._asked:
                self._asked[run.id] = float(labels.get("yoloq.preempt_asked_at") or time.time())
                self._logger.info("preemption requested for %s: %s", run.name,
                                  labels.get("yoloq.preempt_reason", ""))
            if run.state and run.state.is_cancelling():
                self._cancelling.setdefault(run.id, time.time())
            if run.state and run.state.is_crashed() and run.id in self._pids:
                self._logger.warning("%s was marked crashed elsewhere; stopping its process", run.name)
                await anyio.to_thread.run_sync(processes.kill_group, self._pids[run.id], 3.0)

    async def _enforce_cancellations(self, now: float) -> None:
        """A cancelled segment stops at its next epoch boundary by itself; past its grace it is
        killed. (Prefect 3.9 workers only cancel runs that have not started.)"""
        for flow_run_id, since in list(self._cancelling.items()):
            view, pid = self._views.get(flow_run_id), self._pids.get(flow_run_id)
            if pid is None or view is None:
                self._cancelling.pop(flow_run_id, None)
                continue
            if now - since > self._grace(flow_run_id, view):
                self._logger.info("%s cancelled and past its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
                await self._set_state(flow_run_id, "cancelled", "cancelled by user (killed after grace)")

    async def _enforce_grace(self, now: float) -> None:
        """Kill own victims that did not reach an epoch boundary within their grace time."""
        for flow_run_id, asked in list(self._asked.items()):
            view = self._views.get(flow_run_id)
            pid = self._pids.get(flow_run_id)
            if pid is None or view is None:
                continue
            if now - asked > self._grace(flow_run_id, view):
                self._logger.warning("%s did not stop within its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)

    def _grace(self, flow_run_id: UUID, view: SegmentView) -> float:
        return self._policy.grace_for(self._epoch_s(flow_run_id, view))

    def _epoch_s(self, flow_run_id: UUID, view: SegmentView) -> float:
        gpus = [g for g in self._gpus if g.index in self._reserved.get(flow_run_id, ())]
        speed = min((gpu_speed(g) for g in gpus), default=1.0)
        return epoch_time_here(self._started_at.get(flow_run_id), view, speed)

    async def _notify_quota_breaches(self, decision: Any, now: float) -> None:
        from yoloq.records.quota_alerts import NotifiedBreaches, notify_quota_breaches

        if decision.raw.quota_breaches:
            await anyio.to_thread.run_sync(notify_quota_breaches, decision.raw.quota_breaches,
                                           NotifiedBreaches(), now)

    async def _publish_board(self, result: PassResult, now: float) -> None:
        try:
            from work_pools.board import publish_if_changed

            await publish_if_changed(self.client, _BoardSource(self._work_pool_name, self._policy, result),
                                     result.decision, now)
        except Exception as exc:  # the board is informative; never stop scheduling for it
            self._logger.debug("queue board not published: %s", exc)

    # -- processes ---------------------------------------------------------------

    async def run(self, flow_run: Any, configuration: YoloGpuJobConfiguration,
                  task_status: Optional[anyio.abc.TaskStatus[int]] = None) -> YoloGpuWorkerResult:
        gpus = self._reserved.get(flow_run.id, ())
        env = {**os.environ, **{k: v for k, v in configuration.env.items() if v is not None},
               "PREFECT__FLOW_RUN_ID": str(flow_run.id), "YOLOQ_NODE_NAME": self.node_name,
               "CUDA_VISIBLE_DEVICES": self._visible_devices(gpus)}
        if flow_run.id in self._batches:
            env[REDUCED_BATCH_ENV] = str(self._batches[flow_run.id])
        cwd = configuration.working_dir or Path.cwd()
        process = await self._starter.start_segment(env, cwd, configuration.stream_output)
        self._pids[flow_run.id] = process.pid
        self._live_runs_changed()
        self._started_at[flow_run.id] = time.time()
        processes.record_pid(flow_run.id, process.pid, self.node_name)
        if task_status is not None:
            task_status.started(process.pid)
        try:
            code = await process.wait()
        finally:
            processes.forget_pid(flow_run.id, self.node_name)
            self._release(flow_run.id)
            self._live_runs_changed()
            self._slot_freed(flow_run.id)
        return YoloGpuWorkerResult(status_code=code, identifier=str(process.pid))

    def _slot_freed(self, flow_run_id: UUID) -> None:
        """A GPU came free here: schedule now, and tell the other nodes' scheduler."""
        if not self._waker.serving:
            return
        self._kick("segment process exited", time.time())
        pool_id = getattr(self._work_pool, "id", None)
        events_wake.emit_slot_freed(self.node_name, self._work_pool_name, pool_id, flow_run_id)

    def _visible_devices(self, gpus: tuple[int, ...]) -> str:
        real = [g for g in self._gpus if g.index in gpus and g.is_real]
        return ",".join(str(g.index) for g in real) if real else ""

    def _release(self, flow_run_id: UUID) -> None:
        """Free the slot: only called once the segment's process has exited."""
        for table in (self._reserved, self._pids, self._started_at, self._asked, self._views,
                      self._cancelling, self._batches):
            table.pop(flow_run_id, None)

    async def kill_infrastructure(self, infrastructure_pid: str, configuration: Any,
                                  grace_seconds: int = 30) -> None:
        await anyio.to_thread.run_sync(processes.kill_group, int(infrastructure_pid.split(":")[-1]),
                                       float(min(grace_seconds, 10)))

    async def _stop_all_segments(self, reason: str) -> None:
        pids = list(self._pids.items())
        for flow_run_id, pid in pids:
            self._logger.info("stopping segment %s (%s)", flow_run_id, reason)
        await anyio.to_thread.run_sync(lambda: [processes.kill_group(pid, 3.0) for _, pid in pids])
        for flow_run_id, _ in pids:
            if await self._ended(flow_run_id):  # its process was only exiting: keep its outcome
                continue
            await self._crash(flow_run_id, f"Segment stopped: {reason}. The job resumes from its "
                                           "last checkpoint.")

    async def _ended(self, flow_run_id: UUID) -> bool:
        """Whether the run already has a final state (False when it cannot be read)."""
        try:
            run = await self.client.read_flow_run(flow_run_id)
        except Exception:
            return False
        return bool(run.state and run.state.is_final())

    async def _crash(self, flow_run_id: UUID, message: str) -> None:
        await self._set_state(flow_run_id, "crashed", message)

    async def _set_state(self, flow_run_id: UUID, kind: str, message: str,
                         attempts: int = 5) -> bool:
        """Force a final state, retrying with backoff; False when the API never took it (the
        orphan check finds the run again at a later pass)."""
        from prefect.states import Cancelled, Crashed

        state = {"crashed": Crashed, "cancelled": Cancelled}[kind](message=message)
        for attempt in range(attempts):
            try:
                await self.client.set_flow_run_state(flow_run_id, state, force=True)
                return True
            except Exception as exc:
                self._logger.warning("could not mark %s %s (attempt %d): %s", flow_run_id, kind,
                                     attempt + 1, exc)
                await anyio.sleep(min(8.0, 0.5 * 2 ** attempt))
        return False

    async def _fail_leftovers(self) -> None:
        """A restarted agent kills segments a previous instance on this node left; the runs
        themselves are marked by the orphan check (which retries until it succeeds)."""
        for flow_run_id, pid in processes.leftover_pids(self.node_name):
            await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
            processes.forget_pid(flow_run_id, self.node_name)
        self._orphans_checked_at = 0.0

    async def _mark_orphans(self, now: float) -> None:
        """Runs assigned to this node that Prefect thinks are running but that have no live
        process here (the agent restarted, or a process vanished) are marked Crashed."""
        if now - self._orphans_checked_at < ORPHAN_CHECK_S:
            return
        self._orphans_checked_at = now
        from work_pools.pool_scheduler import _open_runs

        for run in await _open_runs(self.client, self._work_pool_name):
            where = assignment(run)
            if (where is None or where[0] != self.node_name or run.id in self._reserved
                    or run.id in self._submitting_flow_run_ids or run.state is None
                    or run.state.is_scheduled()):
                continue
            await self._crash(run.id, f"Node {self.node_name} has no process for this segment "
                                      "(the agent restarted or the process vanished). The job "
                                      "resumes from its last checkpoint.")


class _BoardSource:
    """What the queue board reads: the pool's name, the policy, all running segments."""

    def __init__(self, pool: str, policy: WorkerPolicy, result: PassResult) -> None:
        self.name = pool
        self._policy = policy
        self._result = result

    def _running_views(self) -> list[SegmentView]:
        return list(self._result.running)

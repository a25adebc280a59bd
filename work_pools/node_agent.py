"""The node agent of one GPU host: its segments' processes, their grace, its heartbeat.

It publishes this node's GPU inventory, a heartbeat and the runs whose processes are alive
(`work_pools.nodes`), from a task of its own: every few seconds and whenever a process
starts or exits, so no scheduling pass waits on that write. It keeps the GPUs of each
segment it started reserved until that segment's process has exited; kills its own
preemption victims that overstay their grace, cancelled runs past theirs, and its own runs
that someone else marked Crashed; marks Crashed the runs assigned here that have no process
(an agent restart); and on `yoloq down` drains its segments (`work_pools.drain`).

It decides nothing: what to start comes from the pool leader's assignments
(`work_pools.pool_leader`), and `work_pools.worker` wires the two into Prefect's worker.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Collection
from uuid import UUID

import anyio
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from work_pools import drain, nodes, processes
from work_pools.inventory import GpuInfo
from work_pools.pool_scheduler import assignment
from work_pools.scheduling import WorkerPolicy, epoch_time_here, gpu_speed
from work_pools.segments import SegmentView, segment_view
from yoloq.domain.contract import (EPOCH_LABEL, PREEMPT_ASKED_AT_LABEL, PREEMPT_LABEL, PREEMPT_REASON_LABEL,
                                   PREEMPT_REQUESTED)

ORPHAN_CHECK_S = 5.0


class NodeAgent:
    """The segments running on one node and what it owes them."""

    def __init__(self, pool: str, node_name: str, logger: Any, policy: WorkerPolicy) -> None:
        self.pool, self.node_name, self.logger, self.policy = pool, node_name, logger, policy
        self.gpus: list[GpuInfo] = []
        self.reserved: dict[UUID, tuple[int, ...]] = {}   # local GPUs, until the process exits
        self.views: dict[UUID, SegmentView] = {}
        self.started_at: dict[UUID, float] = {}
        self.pids: dict[UUID, int] = {}
        self.asked: dict[UUID, float] = {}                  # own victim -> when it was asked
        self.cancelling: dict[UUID, float] = {}             # cancelled by a user -> first seen
        self.batches: dict[UUID, int] = {}                  # admitted with a reduced batch
        self.orphans_checked_at = 0.0
        self.stopping = False
        self.heartbeats = 0
        self._heartbeat_due: anyio.Event | None = None

    # -- the node record -----------------------------------------------------------

    def own_record(self) -> nodes.NodeRecord:
        return nodes.make_record(self.node_name, self.gpus, [str(i) for i in self.pids], pool=self.pool)

    async def heartbeat(self, client: Any) -> None:
        await nodes.publish(client, self.own_record())
        self.heartbeats += 1

    async def heartbeat_loop(self, client: Any) -> None:
        """Publish the node record every `heartbeat_every_s()` and as soon as a segment
        process starts or exits. On SQLite this upsert waits seconds for the write lock
        under load; in its own task it delays no scheduling pass."""
        self._heartbeat_due = anyio.Event()
        while not self.stopping:
            with anyio.move_on_after(nodes.heartbeat_every_s()):
                await self._heartbeat_due.wait()
            self._heartbeat_due = anyio.Event()
            if self.stopping:  # the agent removes the record; a late beat must not restore it
                return
            try:
                await self.heartbeat(client)
            except Exception as exc:  # the API restarting: the next beat tries again
                self.logger.warning("heartbeat not published (%s)", " ".join(str(exc).split())[:200])

    def live_runs_changed(self) -> None:
        if self._heartbeat_due is not None:
            self._heartbeat_due.set()

    # -- the segments of this node -------------------------------------------------

    def reserve(self, run: Any, gpus: tuple[int, ...], batch: str | None) -> None:
        self.reserved[run.id] = gpus
        if batch:
            self.batches[run.id] = int(batch)
        self.views[run.id] = segment_view(run)

    def started(self, flow_run_id: UUID, pid: int) -> None:
        self.pids[flow_run_id] = pid
        self.started_at[flow_run_id] = time.time()
        processes.record_pid(flow_run_id, pid, self.node_name)
        self.live_runs_changed()

    def exited(self, flow_run_id: UUID) -> None:
        processes.forget_pid(flow_run_id, self.node_name)
        self.release(flow_run_id)
        self.live_runs_changed()

    def release(self, flow_run_id: UUID) -> None:
        """Free the slot: only called once the segment's process has exited."""
        for table in (self.reserved, self.pids, self.started_at, self.asked, self.views,
                      self.cancelling, self.batches):
            table.pop(flow_run_id, None)

    def running_views(self) -> list[SegmentView]:
        return [self.views[i] for i in self.reserved if i in self.views]

    def visible_devices(self, gpus: tuple[int, ...]) -> str:
        real = [g for g in self.gpus if g.index in gpus and g.is_real]
        return ",".join(str(g.index) for g in real) if real else ""

    async def refresh_own_runs(self, client: Any) -> None:
        """Read the runs on this node: progress labels, preemption requests, cancels, and
        whether someone else marked a run Crashed (a drain): then its process must go."""
        ids = [i for i in self.reserved if i in self.views]
        if not ids:
            return
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        for run in runs:
            self.views[run.id] = segment_view(run)
            labels = run.labels or {}
            if labels.get(PREEMPT_LABEL) == PREEMPT_REQUESTED and run.id not in self.asked:
                self.asked[run.id] = float(labels.get(PREEMPT_ASKED_AT_LABEL) or time.time())
                self.logger.info("preemption requested for %s: %s", run.name,
                                 labels.get(PREEMPT_REASON_LABEL, ""))
            if run.state and run.state.is_cancelling():
                self.cancelling.setdefault(run.id, time.time())
            if run.state and run.state.is_crashed() and run.id in self.pids:
                self.logger.warning("%s was marked crashed elsewhere; stopping its process", run.name)
                await anyio.to_thread.run_sync(processes.kill_group, self.pids[run.id], 3.0)

    # -- grace ---------------------------------------------------------------------

    async def enforce_cancellations(self, client: Any, now: float) -> None:
        """A cancelled segment stops at its next epoch boundary by itself; past its grace it is
        killed. (Prefect 3.9 workers only cancel runs that have not started.)"""
        for flow_run_id, since in list(self.cancelling.items()):
            view, pid = self.views.get(flow_run_id), self.pids.get(flow_run_id)
            if pid is None or view is None:
                self.cancelling.pop(flow_run_id, None)
                continue
            if now - since > self.grace(flow_run_id, view):
                self.logger.info("%s cancelled and past its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
                await self.set_state(client, flow_run_id, "cancelled",
                                     "cancelled by user (killed after grace)")

    async def enforce_grace(self, now: float) -> None:
        """Kill own victims that did not reach an epoch boundary within their grace time."""
        for flow_run_id, asked in list(self.asked.items()):
            view = self.views.get(flow_run_id)
            pid = self.pids.get(flow_run_id)
            if pid is None or view is None:
                continue
            if now - asked > self.grace(flow_run_id, view):
                self.logger.warning("%s did not stop within its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)

    def grace(self, flow_run_id: UUID, view: SegmentView) -> float:
        return self.policy.grace_for(self.epoch_s(flow_run_id, view))

    def epoch_s(self, flow_run_id: UUID, view: SegmentView) -> float:
        gpus = [g for g in self.gpus if g.index in self.reserved.get(flow_run_id, ())]
        speed = min((gpu_speed(g) for g in gpus), default=1.0)
        return epoch_time_here(self.started_at.get(flow_run_id), view, speed)

    # -- stopping ------------------------------------------------------------------

    async def drain(self, client: Any, request: drain.DrainRequest,
                    report_to: Any = None) -> list[drain.Outcome]:
        """Ask every segment here to stop at its next epoch boundary (with a checkpoint), wait
        for each within its bound, stop the rest hard; the outcome of each, also written to
        `report_to` (the state folder) for `yoloq down`."""
        started = time.time()
        await self.refresh_own_runs(client)
        asked = {i: self.views[i] for i in self.pids if i in self.views}
        deadline: dict[UUID, float] = {}
        for flow_run_id, view in asked.items():
            wait = request.timeout_s if request.timeout_s is not None else self._drain_bound(flow_run_id, view)
            deadline[flow_run_id] = started + wait
            try:
                await client.update_flow_run_labels(flow_run_id, {
                    drain.DRAIN_LABEL: "requested", drain.DRAIN_REASON_LABEL: request.reason,
                    drain.DRAIN_ASKED_AT_LABEL: f"{started:.3f}"})
            except Exception as exc:  # it cannot be asked: it is stopped hard at its deadline
                self.logger.warning("could not ask %s to drain (%s)", view.name, exc)
            self.logger.info("draining %s: stop at its next epoch boundary within %.0f s (%s)",
                             view.name, wait, request.reason)
        if report_to is not None and deadline:
            drain.write_deadline(report_to, max(deadline.values()))
        while any(i in self.pids and time.time() < deadline[i] for i in asked):
            await anyio.sleep(0.3)
        outcomes = [await self._drain_outcome(client, flow_run_id, view)
                    for flow_run_id, view in asked.items()]
        if report_to is not None:
            drain.write_report(report_to, outcomes, time.time() - started)
        return outcomes

    def _drain_bound(self, flow_run_id: UUID, view: SegmentView) -> float:
        """One epoch plus the checkpoint upload, as this segment measured them."""
        measured = view.labels.get(drain.EPOCH_S_LABEL)
        epoch_s = float(measured) if measured else self.epoch_s(flow_run_id, view)
        upload = view.labels.get(drain.CHECKPOINT_S_LABEL)
        return drain.bound_s(epoch_s, float(upload) if upload else None)

    async def _drain_outcome(self, client: Any, flow_run_id: UUID, view: SegmentView) -> drain.Outcome:
        run = await client.read_flow_run(flow_run_id)
        labels = run.labels or {}
        epoch = int(labels.get(EPOCH_LABEL) or view.epochs_done)
        if flow_run_id not in self.pids:  # reached a boundary (or ended by itself)
            state = run.state.name if run.state else "unknown"
            return drain.Outcome(view.job_id, view.name, True, epoch, state)
        pid = self.pids[flow_run_id]
        await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
        run = await client.read_flow_run(flow_run_id)  # it may have uploaded meanwhile
        labels = run.labels or {}
        epoch = int(labels.get(EPOCH_LABEL) or view.epochs_done)
        if run.state and run.state.is_final() and not run.state.is_crashed():
            return drain.Outcome(view.job_id, view.name, True, epoch, run.state.name)  # just ended
        trained = int(labels.get(drain.TRAINED_LABEL) or epoch)
        span = drain.retrained(epoch, trained, view.stop_after_epoch or view.epochs)
        outcome = drain.Outcome(view.job_id, view.name, False, epoch, "Crashed",
                                *(span or (None, None)))
        await self.crash(client, flow_run_id, f"Segment stopped hard by yoloq down. {outcome.line()}")
        return outcome

    async def stop_all(self, client: Any, reason: str) -> None:
        pids = list(self.pids.items())
        for flow_run_id, pid in pids:
            self.logger.info("stopping segment %s (%s)", flow_run_id, reason)
        await anyio.to_thread.run_sync(lambda: [processes.kill_group(pid, 3.0) for _, pid in pids])
        for flow_run_id, _ in pids:
            if await self._ended(client, flow_run_id):  # its process was only exiting: keep it
                continue
            await self.crash(client, flow_run_id, f"Segment stopped: {reason}. The job resumes "
                                                  "from its last checkpoint.")

    async def _ended(self, client: Any, flow_run_id: UUID) -> bool:
        """Whether the run already has a final state (False when it cannot be read)."""
        try:
            run = await client.read_flow_run(flow_run_id)
        except Exception:
            return False
        return bool(run.state and run.state.is_final())

    async def crash(self, client: Any, flow_run_id: UUID, message: str) -> None:
        await self.set_state(client, flow_run_id, "crashed", message)

    async def set_state(self, client: Any, flow_run_id: UUID, kind: str, message: str,
                        attempts: int = 5) -> bool:
        """Force a final state, retrying with backoff; False when the API never took it (the
        orphan check finds the run again at a later pass)."""
        from prefect.states import Cancelled, Crashed

        state = {"crashed": Crashed, "cancelled": Cancelled}[kind](message=message)
        for attempt in range(attempts):
            try:
                await client.set_flow_run_state(flow_run_id, state, force=True)
                return True
            except Exception as exc:
                self.logger.warning("could not mark %s %s (attempt %d): %s", flow_run_id, kind,
                                    attempt + 1, exc)
                await anyio.sleep(min(8.0, 0.5 * 2 ** attempt))
        return False

    # -- what a previous agent left ------------------------------------------------

    async def fail_leftovers(self) -> None:
        """A restarted agent kills segments a previous instance on this node left; the runs
        themselves are marked by the orphan check (which retries until it succeeds)."""
        for flow_run_id, pid in processes.leftover_pids(self.node_name):
            await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
            processes.forget_pid(flow_run_id, self.node_name)
        self.orphans_checked_at = 0.0

    async def mark_orphans(self, client: Any, submitting: Collection[UUID], now: float,
                           open_runs: Callable[[], Any]) -> None:
        """Runs assigned to this node that Prefect thinks are running but that have no live
        process here (the agent restarted, or a process vanished) are marked Crashed."""
        if now - self.orphans_checked_at < ORPHAN_CHECK_S:
            return
        self.orphans_checked_at = now
        for run in await open_runs():
            where = assignment(run)
            if (where is None or where[0] != self.node_name or run.id in self.reserved
                    or run.id in submitting or run.state is None or run.state.is_scheduled()):
                continue
            await self.crash(client, run.id, f"Node {self.node_name} has no process for this "
                                             "segment (the agent restarted or the process "
                                             "vanished). The job resumes from its last checkpoint.")

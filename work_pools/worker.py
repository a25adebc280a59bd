"""The `yolo-gpu` worker type: Prefect's worker, wired to this node's agent and the pool leader.

Every poll it (1) refreshes this node's runs (`work_pools.node_agent`), (2) decides for every
node of the pool if it holds the scheduler lease (`work_pools.pool_leader`), (3) starts the
segments assigned to this node, on the GPUs assigned, as processes with
`CUDA_VISIBLE_DEVICES`, and (4) enforces grace, cancellations and orphans. A GPU is released
only after its segment's process has exited. On a clean stop it releases the lease first;
when `yoloq down` asked for a drain (`work_pools.drain`) its segments stop at their next
epoch boundary before the rest are stopped hard.

This is the module the `prefect.collections` entry point registers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional

import anyio
from pydantic import Field
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.workers.base import (
    BaseJobConfiguration,
    BaseVariables,
    BaseWorker,
    BaseWorkerResult,
)

from work_pools import drain, events_wake, nodes
from work_pools.announce import urgent_job_submitted
from work_pools.inventory import inventory
from work_pools.node_agent import NodeAgent
from work_pools.pool_leader import PoolLeader
from work_pools.pool_scheduler import assignment
from work_pools.scheduling import WorkerPolicy
from work_pools.usage import BATCH_LABEL
from work_pools.warm_start import SegmentStarter
from yoloq.base.paths import state_paths
from yoloq.base.names import REDUCED_BATCH_ENV
from yoloq.domain.contract import ADMIT_REASON_LABEL
from yoloq.settings import settings


POLICY_REFRESH_S = settings().policy_refresh_s


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
        policy = WorkerPolicy.from_env()
        self._policy_read_at = time.time()
        self.agent = NodeAgent(self._work_pool_name, self.node_name, self._logger, policy)
        self.leader = PoolLeader(self._work_pool_name, self.node_name, self._logger, policy)
        self._created_at = time.time()
        self._stopping = False
        self.wake = events_wake.WakeStats()
        self._waker = events_wake.PassWaker(self.get_and_submit_flow_runs)

    @property
    def is_leader(self) -> bool:
        return self.leader.is_leader

    async def setup(self) -> None:
        await super().setup()
        self._starter = SegmentStarter(self._logger)  # the warm launcher (YOLOQ_WARM_START)
        self.agent.gpus = inventory()
        gpus = self.agent.gpus
        self._logger.info("node %s, GPU inventory (%s): %s", self.node_name,
                          "/".join(sorted({g.kind for g in gpus})),
                          ", ".join(f"{g.index}:{g.name} {g.mem_total_gb:.0f}GB" for g in gpus))
        await self.agent.fail_leftovers()
        await self.agent.heartbeat(self.client)
        self._runs_task_group.start_soon(self.agent.heartbeat_loop, self.client)
        self.leader.keep_lease(self._runs_task_group, self.client)
        self._pass_lock = anyio.Lock()
        self._wake_cause: tuple[str, float] | None = None
        if events_wake.enabled():
            self._waker = events_wake.PassWaker(self.get_and_submit_flow_runs, self._logger)
            self._runs_task_group.start_soon(
                self._waker.serve, events_wake.run_state_filter((events_wake.SLOT_FREED,)), self._on_event)

    async def teardown(self, *exc_info: Any) -> None:
        """Release the lease while the server is up, drain if `yoloq down` asked, stop the rest."""
        self._stopping = True  # no pass starts anything from here on
        self._waker.stop()
        if getattr(self, "_starter", None) is not None:  # set up: the client is open
            await self._leave_cleanly()
        await super().teardown(*exc_info)

    async def _leave_cleanly(self) -> None:
        try:
            await self.leader.resign(self.client)
        except Exception as exc:
            self._logger.warning("could not release the scheduler lease: %s", exc)
        request = drain.take_request(state_paths().root, since=self._created_at)
        if request is not None and self.agent.pids:
            try:
                for outcome in await self.agent.drain(self.client, request, state_paths().root):
                    self._logger.info("drain: %s", outcome.line())
            except Exception as exc:  # the rest are stopped hard below
                self._logger.warning("drain interrupted (%s); stopping the rest", exc)
        elif request is not None:
            drain.write_report(state_paths().root, [], 0.0)
        self.agent.stopping = True
        self.agent.live_runs_changed()  # wakes the heartbeat loop, which sees it and ends
        await self.agent.stop_all(self.client, "node agent shutting down")
        self._starter.close()
        try:
            await nodes.remove(self.client, self.node_name)
        except Exception as exc:
            self._logger.warning("could not leave the pool cleanly: %s", exc)

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
        """Replace Prefect's first-come submission: decide if leader, start ours."""
        if self._stopping:
            return []
        try:
            return await self._poll_once(flow_run_response)
        except Exception:  # a service loop logs a failure and keeps going
            self._logger.exception("node pass failed; retrying at the next poll")
            return []

    async def _poll_once(self, flow_run_response: list[Any]) -> list[Any]:
        now = time.time()
        await self.agent.refresh_own_runs(self.client)
        await self._reload_policy(now)
        leading = await self.leader.hold(self.client)
        if leading:
            await self.leader.lead(self.client, self.agent.own_record(), now)
            flow_run_response = await self._with_fresh_assignments(flow_run_response)
        started = self._start_assigned(flow_run_response)
        if leading and self.leader.last_pass is not None:
            self.leader.report_soon(self._runs_task_group, self.client, self.leader.last_pass,
                                    now, self.wake.as_dict())
        await self.agent.enforce_grace(time.time())
        await self.agent.enforce_cancellations(self.client, time.time())
        await self.agent.mark_orphans(self.client, self._submitting_flow_run_ids, time.time(),
                                      self._open_runs)
        return started

    async def _open_runs(self) -> list[Any]:
        from work_pools.pool_scheduler import _open_runs

        return await _open_runs(self.client, self._work_pool_name)

    async def _reload_policy(self, now: float) -> None:
        """Re-read the policy block now and then, so quota and weight changes apply live."""
        if now - self._policy_read_at < POLICY_REFRESH_S:
            return
        self._policy_read_at = now
        policy = await anyio.to_thread.run_sync(WorkerPolicy.from_env)
        if policy != self.leader.policy:
            self._logger.info("scheduling policy changed (%s)", policy.source)
            self.agent.policy = self.leader.policy = policy

    async def _with_fresh_assignments(self, flow_run_response: list[Any]) -> list[Any]:
        """Re-read the runs this pass just assigned to this node, so they start in this pass
        rather than at the next poll (their labels were written after the response was read)."""
        last = self.leader.last_pass
        mine = {i for i, (node, _) in (last.assigned if last else {}).items() if node == self.node_name}
        stale = [e for e in flow_run_response if e.flow_run.id in mine and assignment(e.flow_run) is None]
        if not stale:
            return flow_run_response
        fresh = {r.id: r for r in await self.client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[e.flow_run.id for e in stale])))}
        for entry in stale:
            entry.flow_run = fresh.get(entry.flow_run.id, entry.flow_run)
        return flow_run_response

    def _start_assigned(self, flow_run_response: list[Any]) -> list[Any]:
        """Start the scheduled runs the scheduler assigned to this node (labels on the run)."""
        started = []
        for entry in flow_run_response:
            run = entry.flow_run
            where = assignment(run)
            if where is None or where[0] != self.node_name or run.id in self.agent.reserved:
                continue
            self.agent.reserve(run, where[1], (run.labels or {}).get(BATCH_LABEL))
            self.get_flow_run_logger(run).info("starting on node %s GPU %s: %s", self.node_name,
                                               where[1], (run.labels or {}).get(ADMIT_REASON_LABEL, ""))
            self._runs_task_group.start_soon(self._start_segment, run)
            started.append(run)
        return started

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
            if flow_run.id not in self.agent.pids:  # never started (e.g. cancelled meanwhile)
                self.agent.release(flow_run.id)

    # -- processes ---------------------------------------------------------------

    async def run(self, flow_run: Any, configuration: YoloGpuJobConfiguration,
                  task_status: Optional[anyio.abc.TaskStatus[int]] = None) -> YoloGpuWorkerResult:
        gpus = self.agent.reserved.get(flow_run.id, ())
        env = {**os.environ, **{k: v for k, v in configuration.env.items() if v is not None},
               "PREFECT__FLOW_RUN_ID": str(flow_run.id), "YOLOQ_NODE_NAME": self.node_name,
               "CUDA_VISIBLE_DEVICES": self.agent.visible_devices(gpus)}
        if flow_run.id in self.agent.batches:
            env[REDUCED_BATCH_ENV] = str(self.agent.batches[flow_run.id])
        cwd = configuration.working_dir or Path.cwd()
        process = await self._starter.start_segment(env, cwd, configuration.stream_output)
        self.agent.started(flow_run.id, process.pid)
        if task_status is not None:
            task_status.started(process.pid)
        try:
            code = await process.wait()
        finally:
            self.agent.exited(flow_run.id)
            self._slot_freed(flow_run.id)
        return YoloGpuWorkerResult(status_code=code, identifier=str(process.pid))

    def _slot_freed(self, flow_run_id: Any) -> None:
        """A GPU came free here: schedule now, and tell the other nodes' scheduler."""
        if not self._waker.serving:
            return
        self._kick("segment process exited", time.time())
        pool_id = getattr(self._work_pool, "id", None)
        events_wake.emit_slot_freed(self.node_name, self._work_pool_name, pool_id, flow_run_id)

    async def kill_infrastructure(self, infrastructure_pid: str, configuration: Any,
                                  grace_seconds: int = 30) -> None:
        from work_pools import processes

        await anyio.to_thread.run_sync(processes.kill_group, int(infrastructure_pid.split(":")[-1]),
                                       float(min(grace_seconds, 10)))

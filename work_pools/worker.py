"""The `yolo-gpu` worker: grants GPU slots by policy and preempts at epoch boundaries.

Each poll it builds a snapshot (GPU inventory, running and pending segments),
asks the pure policy for a Decision, starts admitted segments as processes with
`CUDA_VISIBLE_DEVICES`, and labels victims so they stop at their next epoch
boundary. A GPU is released only after its segment's process has exited.
"""

from __future__ import annotations

import os
import sys
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

from work_pools import processes
from work_pools.inventory import GpuInfo, inventory
from work_pools.ledger import UsageKeeper
from work_pools.scheduling import WorkerPolicy, schedule
from work_pools.segments import SegmentView, segment_view
from yoloq.settings import PREEMPT_LABEL, REDUCED_BATCH_ENV


POLICY_REFRESH_S = 30.0


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
    _description = ("Runs YOLO training segments on this host's GPUs, granting slots by "
                    "priority, fair share and memory, and preempting lower tiers at epoch "
                    "boundaries.")
    _display_name = "YOLO GPU"
    _documentation_url = "https://github.com/yoloq/yoloq#the-yolo-gpu-worker"
    _logo_url = "https://raw.githubusercontent.com/PrefectHQ/prefect/main/docs/images/logos/prefect-logo-mark.svg"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gpus: list[GpuInfo] = []
        self._policy = WorkerPolicy.from_env()
        self._ledger = UsageKeeper(self._policy.policy)
        self._policy_read_at = time.time()
        self._reserved: dict[UUID, tuple[int, ...]] = {}   # admitted, until the process exits
        self._views: dict[UUID, SegmentView] = {}
        self._started_at: dict[UUID, float] = {}
        self._pids: dict[UUID, int] = {}
        self._asked: dict[UUID, float] = {}                  # victim -> when it was asked to stop
        self._cancelling: dict[UUID, float] = {}             # cancelled by a user -> first seen
        self._batches: dict[UUID, int] = {}                  # admitted with a reduced batch
        self._stopping = False

    async def setup(self) -> None:
        await super().setup()
        self._gpus = inventory()
        kinds = {g.kind for g in self._gpus}
        self._logger.info("GPU inventory (%s): %s", "/".join(sorted(kinds)),
                          ", ".join(f"{g.index}:{g.name} {g.mem_total_gb:.0f}GB" for g in self._gpus))
        await self._fail_leftovers()

    async def teardown(self, *exc_info: Any) -> None:
        self._stopping = True
        await self._stop_all_segments("worker shutting down")
        await super().teardown(*exc_info)

    # -- scheduling --------------------------------------------------------------

    async def _submit_scheduled_flow_runs(self, flow_run_response: list[Any]) -> list[Any]:
        """Replace Prefect's first-come submission with the policy's decision."""
        if self._stopping:
            return []
        try:
            return await self._schedule_once(flow_run_response)
        except Exception:  # a service loop logs a failure and keeps going
            self._logger.exception("scheduling pass failed; retrying at the next poll")
            return []

    async def _schedule_once(self, flow_run_response: list[Any]) -> list[Any]:
        pending = {r.flow_run.id: r.flow_run for r in flow_run_response
                   if r.flow_run.id not in self._reserved}
        await self._refresh_running_labels()
        now = time.time()
        await self._reload_policy(now)
        ledger = self._ledger.charge_running(self._running_views(), self._reserved,
                                             self._started_at, self._gpus, now)
        decision = schedule(self._gpus, self._running_views(),
                            [segment_view(f) for f in pending.values()], self._reserved,
                            self._started_at, now, self._policy, asked=set(self._asked),
                            ledger=ledger)
        for victim in decision.preempt:
            await self._ask_to_stop(victim.flow_run_id, victim.by_job, victim.reason)
        await self._enforce_grace(now)
        await self._enforce_cancellations(now)
        started = []
        for admit in decision.admit:
            flow_run = pending[admit.flow_run_id]
            self._reserved[flow_run.id] = admit.gpus
            if admit.batch:
                self._batches[flow_run.id] = admit.batch
            self._views[flow_run.id] = segment_view(flow_run)
            self.get_flow_run_logger(flow_run).info("admitted on GPU %s: %s", admit.gpus, admit.reason)
            self._runs_task_group.start_soon(self._start_segment, flow_run)
            started.append(flow_run)
        self._notify_quota_breaches(decision, now)
        await self._publish_board(decision, now)
        return started

    async def _reload_policy(self, now: float) -> None:
        """Re-read the policy block now and then, so quota and weight changes apply live."""
        if now - self._policy_read_at < POLICY_REFRESH_S:
            return
        self._policy_read_at = now
        policy = await anyio.to_thread.run_sync(WorkerPolicy.from_env)
        if policy != self._policy:
            self._logger.info("scheduling policy changed (%s)", policy.source)
            self._policy = policy
            self._ledger.policy = policy.policy

    def _running_views(self) -> list[SegmentView]:
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

    async def _refresh_running_labels(self) -> None:
        """Read live progress labels of running segments (epoch, last checkpoint)."""
        ids = [i for i in self._reserved if i in self._views]
        if not ids:
            return
        runs = await self.client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        for run in runs:
            self._views[run.id] = segment_view(run)
            if run.state and run.state.is_cancelling():
                self._cancelling.setdefault(run.id, time.time())

    async def _enforce_cancellations(self, now: float) -> None:
        """A cancelled segment stops at its next epoch boundary by itself; past its grace it is
        killed. (Prefect 3.9 workers only cancel runs that have not started.)"""
        for flow_run_id, since in list(self._cancelling.items()):
            view, pid = self._views.get(flow_run_id), self._pids.get(flow_run_id)
            if pid is None or view is None:
                self._cancelling.pop(flow_run_id, None)
                continue
            if now - since > self._policy.grace_for(view.est_epoch_s):
                self._logger.info("%s cancelled and past its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
                await self._set_state(flow_run_id, "cancelled", "cancelled by user (killed after grace)")

    async def _ask_to_stop(self, flow_run_id: UUID, by_job: str, reason: str) -> None:
        if flow_run_id in self._asked:
            return
        self._asked[flow_run_id] = time.time()
        await self.client.update_flow_run_labels(flow_run_id, {
            PREEMPT_LABEL: "requested", "yoloq.preempted_by": by_job,
            "yoloq.preempt_reason": reason[:200], "yoloq.preempt_asked_at": f"{time.time():.3f}"})
        view = self._views.get(flow_run_id)
        self._logger.info("preempting %s: %s", view.name if view else flow_run_id, reason)
        from yoloq.events import emit_preemption

        emit_preemption(view, by_job, reason)

    async def _enforce_grace(self, now: float) -> None:
        """Kill victims that did not reach an epoch boundary within their grace time."""
        for flow_run_id, asked in list(self._asked.items()):
            view = self._views.get(flow_run_id)
            pid = self._pids.get(flow_run_id)
            if pid is None or view is None:
                continue
            if now - asked > self._policy.grace_for(view.est_epoch_s):
                self._logger.warning("%s did not stop within its grace; killing it", view.name)
                await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)

    def _notify_quota_breaches(self, decision: Any, now: float) -> None:
        from yoloq.quota_alerts import notify_quota_breaches

        notify_quota_breaches(decision.raw.quota_breaches, self._ledger, now)

    async def _publish_board(self, decision: Any, now: float) -> None:
        try:
            from work_pools.board import publish_if_changed

            await publish_if_changed(self, decision, now)
        except Exception as exc:  # the board is informative; never stop scheduling for it
            self._logger.debug("queue board not published: %s", exc)

    # -- processes ---------------------------------------------------------------

    async def run(self, flow_run: Any, configuration: YoloGpuJobConfiguration,
                  task_status: Optional[anyio.abc.TaskStatus[int]] = None) -> YoloGpuWorkerResult:
        gpus = self._reserved.get(flow_run.id, ())
        env = {**os.environ, **{k: v for k, v in configuration.env.items() if v is not None},
               "PREFECT__FLOW_RUN_ID": str(flow_run.id),
               "CUDA_VISIBLE_DEVICES": self._visible_devices(gpus)}
        if flow_run.id in self._batches:
            env[REDUCED_BATCH_ENV] = str(self._batches[flow_run.id])
        cwd = configuration.working_dir or Path.cwd()
        process = await processes.start([sys.executable, "-m", "prefect.engine"], env, cwd,
                                        configuration.stream_output)
        self._pids[flow_run.id] = process.pid
        self._started_at[flow_run.id] = time.time()
        processes.record_pid(flow_run.id, process.pid)
        if task_status is not None:
            task_status.started(process.pid)
        try:
            code = await process.wait()
        finally:
            processes.forget_pid(flow_run.id)
            self._release(flow_run.id)
        return YoloGpuWorkerResult(status_code=code, identifier=str(process.pid))

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
            await self._crash(flow_run_id, f"Segment stopped: {reason}. The job resumes from its "
                                           "last checkpoint.")

    async def _crash(self, flow_run_id: UUID, message: str) -> None:
        await self._set_state(flow_run_id, "crashed", message)

    async def _set_state(self, flow_run_id: UUID, kind: str, message: str) -> None:
        from prefect.states import Cancelled, Crashed

        state = {"crashed": Crashed, "cancelled": Cancelled}[kind](message=message)
        try:
            await self.client.set_flow_run_state(flow_run_id, state, force=True)
        except Exception as exc:
            self._logger.warning("could not mark %s %s: %s", flow_run_id, kind, exc)

    async def _fail_leftovers(self) -> None:
        """A restarted worker kills segments a previous instance left and marks them crashed."""
        for flow_run_id, pid in processes.leftover_pids():
            await anyio.to_thread.run_sync(processes.kill_group, pid, 3.0)
            processes.forget_pid(flow_run_id)
            try:
                run = await self.client.read_flow_run(flow_run_id)
            except Exception:
                continue
            if run.state and not run.state.is_final():
                await self._crash(flow_run_id, "Worker restarted; the segment it left was stopped. "
                                               "The job resumes from its last checkpoint.")

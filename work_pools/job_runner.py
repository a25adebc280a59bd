"""The job runner: every parent flow run of the `yoloq-jobs` pool runs as a thread of one process.

A stock ProcessWorker starts each `yolo-job` run as its own `python -m prefect.engine`
process (about 340 MB), and a waiting job keeps that process for as long as it waits.
`InProcessJobWorker` keeps everything else of Prefect's worker (polling the pool, the
Scheduled -> Pending proposal that lets only one runner take a run, the cancellation of runs
that have not started, the worker's logs and events) and replaces the process start with a
thread that runs the flow through Prefect's own flow engine (`run_flow`) in this process.
A waiting parent is then a blocked thread waiting on the shared `SegmentWatch`, and the
runner's processes are O(1) in the number of jobs.

`infrastructure_pid` of every run names this process (`host:pid`), so `recover_interrupted`
reschedules all of a runner's parents once the runner process is gone, and none while it lives.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from prefect.exceptions import Abort, Pause
from prefect.workers.process import ProcessWorker, ProcessWorkerResult

from work_pools import events_wake
from yoloq.settings import settings

PROJECT_DIR = Path(__file__).resolve().parent.parent
STARTING_ENV = "YOLOQ_RUNNER_STARTING"


def starting_limit() -> int:
    """Parents starting at once (`YOLOQ_RUNNER_STARTING`, default 4); waiting ones are not counted."""
    return max(1, settings().runner_starting)


class StartGate:
    """At most `limit` parents between their submission and their first wait for a segment.

    A burst of submissions (500 jobs at once) would otherwise have every parent analyse and
    create its segment together: the server's SQLite then answers 503 and
    Prefect's worker marks runs Crashed, and the CPU is shared 500 ways. A parent leaves the
    gate when it first waits (the segment watch calls `leave`) or when its run ends; waiting
    parents hold nothing, so the number of jobs that may wait is not bounded. An urgent job's
    parent does not wait at the gate (`jumps_the_gate`)."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self._local = threading.local()

    def enter(self) -> None:
        self._slots.acquire()
        self._local.held = True

    def leave(self) -> None:
        if getattr(self._local, "held", False):
            self._local.held = False
            self._slots.release()


gate = StartGate(starting_limit())


def jumps_the_gate(flow_run: Any) -> bool:
    """An urgent job's parent starts at once, whatever burst fills the gate: its victim may
    already be draining (`work_pools.announce`). Urgent jobs are few; the gate is for bursts."""
    from work_pools.announce import ANNOUNCED_TAGS

    return bool(ANNOUNCED_TAGS.intersection(flow_run.tags or []))


def parents_without_watcher_threads() -> None:
    """In this process, a parent run gets no suspension observer and no heartbeat thread.

    Prefect 3.9's flow engine gives every run of a deployment two threads of its own: a
    suspension observer (an asyncio loop of its own with a websocket to the server's event
    stream, waking five times a second) and a heartbeat emitter. In one process that runs
    hundreds of parents that is hundreds of loops and websockets: at about 95 waiting jobs the
    next parents' observers got no stream, each new parent waited for its observer before
    starting, the start gate filled with them, and the runner took no more jobs. A parent is
    never suspended (yoloq does not suspend parents, and one could not resume: its steps keep
    no persisted results), and a parent's liveness is the runner's (`infrastructure_id`,
    `recover_interrupted`), so here neither thread starts. Segment processes keep both.
    """
    from contextlib import nullcontext

    from prefect import flow_engine

    flow_engine.observe_flow_run_suspension = lambda *args, **kwargs: nullcontext()
    flow_engine.FlowRunEngine.heartbeat_seconds = property(lambda self: None)


def infrastructure_id() -> str:
    """What every run of this runner records as its `infrastructure_pid`: this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


with warnings.catch_warnings():  # it takes over the `process` type in this process: intended
    warnings.simplefilter("ignore", UserWarning)

    class InProcessJobWorker(ProcessWorker):
        """A `process`-type worker whose flow runs are threads of the worker process itself."""

        async def run(self, flow_run: Any, configuration: Any, task_status: Any = None
                      ) -> ProcessWorkerResult:
            if task_status is not None:
                task_status.started(infrastructure_id())
            code = await _in_thread(lambda: execute(flow_run.id), f"flow-run {flow_run.name}")
            return ProcessWorkerResult(status_code=code, identifier=infrastructure_id())

        async def setup(self) -> None:
            await super().setup()
            self._pass_lock = anyio.Lock()
            self._waker = events_wake.PassWaker(self.get_and_submit_flow_runs, self._logger)
            if events_wake.enabled():
                self._runs_task_group.start_soon(self._waker.serve, events_wake.run_state_filter(),
                                                 self._on_event)

        async def teardown(self, *exc_info: Any) -> None:
            if getattr(self, "_waker", None) is not None:
                self._waker.stop()
            await super().teardown(*exc_info)

        async def get_and_submit_flow_runs(self) -> list[Any]:
            """One poll at a time, whether the poll loop or an event started it."""
            async with self._pass_lock:
                return await super().get_and_submit_flow_runs()

        def _on_event(self, event: Any) -> None:
            """A new job (a run of this pool turning Scheduled) is taken now, not at the next
            1 s poll: on the urgent path that poll was up to a second of submit -> running."""
            if (events_wake.state_type(event) == "SCHEDULED"
                    and events_wake.in_pool(event, self._work_pool_name)):
                self._waker.kick()

        async def _submit_run(self, flow_run: Any) -> None:
            """Prefect's submission step (Pending proposal, labels, events), a few runs at a
            time: the server is spared a burst of writes when hundreds of jobs arrive at once."""
            if getattr(self, "_submit_slots", None) is None:
                self._submit_slots = asyncio.Semaphore(starting_limit())
            async with self._submit_slots:
                await super()._submit_run(flow_run)

        async def _get_scheduled_flow_runs(self) -> list[Any]:
            """Prefect's poll of the jobs pool. An API that answers 5xx or cannot be reached (its
            database restarting) is waited out here: Prefect's service loop would otherwise stop
            the runner, and every waiting parent with it, after about 45 s of failed polls."""
            try:
                return await super()._get_scheduled_flow_runs()
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code < 500:
                    raise
                self._logger.warning("polling the jobs pool failed (%s); polling on",
                                     " ".join(str(exc).split())[:200])
                return []

        async def _give_worker_labels_to_flow_run(self, flow_run_id: Any) -> None:
            """The worker's labels on the run are informative: a busy server refusing them
            (503) must not mark the job Crashed, as Prefect's worker would."""
            try:
                await super()._give_worker_labels_to_flow_run(flow_run_id)
            except Exception as exc:
                self._logger.warning("flow run %s: the runner's labels were not written (%s); "
                                     "running it anyway", flow_run_id, str(exc)[:200])

        async def kill_infrastructure(self, infrastructure_pid: str, configuration: Any,
                                      grace_seconds: int = 30) -> None:
            """A run cancelled before it started has no process of its own to kill (its
            infrastructure is this runner): nothing to do, Prefect's worker then marks it
            Cancelled and the engine of its thread finds it so and stops."""


async def _in_thread(fn: Callable[[], int], name: str) -> int:
    """Run `fn` in a daemon thread of its own (a waiting parent can wait for hours, so no
    pool with a size limit) and await its result without blocking the event loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def target() -> None:
        try:
            result: Any = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(_settle, done, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, done, result, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await done


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def execute(flow_run_id: Any) -> int:
    """Run one flow run to its end in this thread, as `python -m prefect.engine` would in a
    process. Returns 0 when the engine reported the run's outcome, 1 when it did not (the
    worker then proposes Crashed, which the server refuses for a run already final)."""
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.logging.loggers import flow_run_logger

    from yoloq.base.retry import patiently

    def read() -> Any:  # an API that cannot reach its database answers 5xx for a while
        with get_client(sync_client=True) as client:
            return client.read_flow_run(flow_run_id)

    flow_run = patiently(read, f"reading flow run {flow_run_id}", logging.getLogger("yoloq.job_runner"))
    logger = flow_run_logger(flow_run=flow_run)
    if not jumps_the_gate(flow_run):
        gate.enter()
    try:
        flow = patiently(lambda: load_flow(flow_run), "loading the job's flow", logger)
        run_flow(flow, flow_run=flow_run, return_type="state", error_logger=logger)
        _end_cancelling(flow_run_id, logger)
    except (Abort, Pause) as exc:  # the server refused a transition, or another parent took over
        logger.info("flow run %s stopped by the orchestrator: %s", flow_run.name, exc)
    except Exception:
        logger.exception("flow run %s ended with an error outside the flow engine", flow_run.name)
        return 1
    finally:
        gate.leave()
    return 0


def _end_cancelling(flow_run_id: Any, logger: Any) -> None:
    """A cancel that lands as the flow ends leaves the run Cancelling: the server refuses the
    engine's final state, and nothing else would move it (the worker only cancels runs still
    in flight). The flow has returned, so the run is Cancelled here (the engine's own outcome
    was refused; the job's history and MLflow run keep what it trained). Seen in CI: a job
    cancelled while its last segment completed stayed Cancelling."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas import SetStateStatus
    from prefect.states import Cancelled

    from yoloq.base.retry import patiently

    def end() -> str | None:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
            if state is None or not state.is_cancelling():
                return None
            message = f"cancelled as the job ended ({state.message or 'no reason given'})"
            result = client.set_flow_run_state(flow_run_id, Cancelled(message=message))
            if result.status != SetStateStatus.ACCEPT:  # it moved on meanwhile: leave it
                return f"left as the server has it ({result.status.value}: {result.details})"
            return message

    outcome = patiently(end, f"ending flow run {flow_run_id} Cancelled", logger)
    if outcome:
        logger.info("flow run %s: %s", flow_run_id, outcome)


_flows: dict[str, Any] = {}
_flows_lock = threading.Lock()


def load_flow(flow_run: Any) -> Any:
    """The flow of the run's deployment, imported once per entrypoint (`flows/job.py:yolo_job`
    is imported as `flows.job`, the module every other yoloq import uses)."""
    from prefect.client.orchestration import get_client

    if flow_run.deployment_id is None:
        raise ValueError(f"flow run {flow_run.name} has no deployment; the job runner runs "
                         "deployment runs only")
    with get_client(sync_client=True) as client:
        entrypoint = client.read_deployment(flow_run.deployment_id).entrypoint
    with _flows_lock:
        if entrypoint not in _flows:
            _flows[entrypoint] = _import_entrypoint(entrypoint)
        return _flows[entrypoint]


def _import_entrypoint(entrypoint: str) -> Any:
    path, _, name = entrypoint.rpartition(":")
    module = ".".join(Path(path).with_suffix("").parts)
    if not (PROJECT_DIR / path).is_file():
        raise ValueError(f"entrypoint {entrypoint!r} is not a file of {PROJECT_DIR}")
    return getattr(importlib.import_module(module), name)

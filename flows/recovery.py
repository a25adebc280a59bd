"""What a job does when something breaks: how long to wait, and which runs `yoloq up` may
recover.

A transient error (`yoloq.base.retry.is_transient`: a store, tracking server or API that
cannot be reached, a full disk, a configured block that cannot be read) ends a segment
`Crashed`, and its parent queues it again after a backoff, a bounded number of times.
Anything else (a bad spec, a checkpoint that contradicts the plan) ends it `Failed` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yoloq.settings import settings

MAX_RETRIES_ENV = "YOLOQ_SEGMENT_RETRIES"
BACKOFF_ENV = "YOLOQ_RETRY_BACKOFF_S"
PATIENCE_ENV = "YOLOQ_PARENT_PATIENCE_S"


def max_retries() -> int:
    """Crashed segments in a row (no progress between them) before the job fails."""
    return settings().segment_retries


def backoff_s(attempt: int) -> float:
    """Wait before re-queuing after the `attempt`-th crash in a row: 0, b, 2b, 4b ... (cap 300 s).
    The first retry is immediate: a killed segment costs only its partial epoch."""
    base = settings().retry_backoff_s
    return 0.0 if attempt <= 1 else min(base * 2 ** (attempt - 2), 300.0)


# -- runs left mid-flight (`yoloq up`) ---------------------------------------------------------

def recover_interrupted(echo: Callable[[str], Any] = print, *, root: Any = None,
                        runner_alive: bool = False, worker_alive: bool = False) -> int:
    """Runs left mid-flight whose process is really gone: segments -> Crashed, parents ->
    Scheduled again (a rescheduled parent re-reads the job's progress from the checkpoint
    store and queues the rest, so it loses at most the epoch in progress).

    A run whose process is alive is never touched: a live parent keeps its job (resetting it
    would start a second parent), and a live segment is left to the GPU worker (a restarted
    worker stops the segments a previous one left). A run with no recorded process is gone
    only when the service that starts its kind (`runner_alive`, `worker_alive`) is down.

    On a cluster only this host's runs are judged here: a segment of another node is its
    node agent's (a restarted agent marks its orphans Crashed, the scheduler drains a lost
    node), and a parent recorded by a runner on another host (`host:pid`) cannot be checked
    from here, so it is left to `yoloq up` on that host (named in one line).
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed, Scheduled

    from yoloq.base.paths import state_paths

    root = str(root or state_paths().root)
    active = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
        any_=[StateType.RUNNING, StateType.PENDING, StateType.CANCELLING])))
    kinds = (("train-segment", worker_alive, lambda: Crashed(
                 message="its process is gone; the job resumes from its last checkpoint")),
             ("yolo-job", runner_alive, lambda: Scheduled(
                 message="its process is gone; resuming the job")))
    recovered, elsewhere = 0, set()
    with get_client(sync_client=True) as client:
        for deployment, starter_alive, new_state in kinds:
            runs = client.read_flow_runs(flow_run_filter=active, deployment_filter=DeploymentFilter(
                name=DeploymentFilterName(any_=[deployment])))
            for run in runs:
                if deployment == "train-segment" and not _started_here(run, starter_alive):
                    continue  # another node's segment: its own worker looks after it
                if (host := other_host(run.infrastructure_pid)) is not None:
                    elsewhere.add(host)
                    continue
                if not process_gone(run.infrastructure_pid, root, starter_alive):
                    continue
                client.set_flow_run_state(run.id, new_state(), force=True)
                recovered += 1
    if recovered:
        echo(f"recovered {recovered} interrupted run(s)")
    if elsewhere:
        echo(f"left alone: jobs run by the job runner on {', '.join(sorted(elsewhere))} "
             "(run `yoloq up` there to recover them if it stopped)")
    return recovered


def _started_here(run: Any, worker_alive: bool) -> bool:
    """A segment this node's worker started (its PID file is in this state folder), or one
    not started at all while this node's worker is down."""
    from yoloq.base.paths import state_paths

    pid_file = state_paths().pids / "segments" / f"{run.id}.pid"
    return pid_file.exists() or (not run.infrastructure_pid and not worker_alive)


def other_host(infrastructure_pid: str | None) -> str | None:
    """The host of a `host:pid` record when it is not this one (its PID means nothing here)."""
    import socket

    host, sep, _ = str(infrastructure_pid or "").rpartition(":")
    return host if sep and host and host != socket.gethostname() else None


def process_gone(infrastructure_pid: str | None, root: str, starter_alive: bool) -> bool:
    """True when the run's process no longer exists on this host (a PID reused by an
    unrelated process counts as gone). No PID yet: gone unless its starter is alive."""
    import psutil

    if not infrastructure_pid:
        return not starter_alive
    try:
        proc = psutil.Process(int(str(infrastructure_pid).split(":")[-1]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return proc.environ().get("YOLOQ_HOME") != root
    except (ValueError, psutil.NoSuchProcess):
        return True
    except psutil.AccessDenied:
        return False  # someone else's process under that PID: do not guess

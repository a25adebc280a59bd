"""Pools, tier queues and deployments on the server; recovery of interrupted runs."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from yoloq.paths import PROJECT_DIR, state_paths
from yoloq.settings import GPU_POOL, JOBS_POOL
from yoloq.tiers import Tier


def ensure_pools_and_deployments(env: dict[str, str], echo=print) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        _ensure_pool(client, JOBS_POOL, "process")
        _ensure_pool(client, GPU_POOL, "yolo-gpu")
        _ensure_tier_queues(client)
    _deploy(env, echo)


def _ensure_pool(client, name: str, pool_type: str) -> None:
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    try:
        client.read_work_pool(name)
        return
    except ObjectNotFound:
        pass
    if pool_type == "yolo-gpu":
        from work_pools.worker import YoloGpuWorker as worker_class
    else:
        from prefect.workers.process import ProcessWorker as worker_class
    template = worker_class.get_default_base_job_template()
    try:
        client.create_work_pool(WorkPoolCreate(name=name, type=pool_type,
                                               base_job_template=template or {}))
    except ObjectAlreadyExists:
        pass


def _ensure_tier_queues(client) -> None:
    """One queue per tier; the queue priority is the tier value (lower runs first)."""
    from prefect.client.schemas.actions import WorkQueueUpdate
    from prefect.exceptions import ObjectAlreadyExists

    existing = {q.name: q for q in client.read_work_queues(work_pool_name=GPU_POOL)}
    if "default" in existing and existing["default"].priority <= len(Tier):
        client.update_work_queue(existing["default"].id, priority=len(Tier) + 1)
    for tier in Tier:
        if tier.queue in existing:
            if existing[tier.queue].priority != tier.value:
                client.update_work_queue(existing[tier.queue].id, priority=tier.value)
            continue
        try:
            client.create_work_queue(name=tier.queue, work_pool_name=GPU_POOL, priority=tier.value,
                                     description=f"{tier.label} tier of the yolo-gpu pool")
        except ObjectAlreadyExists:
            pass


def _deploy(env: dict[str, str], echo) -> None:
    """`prefect deploy --all` from prefect.yaml, skipped when nothing changed since last time."""
    digest = hashlib.sha256((PROJECT_DIR / "prefect.yaml").read_bytes()).hexdigest()
    marker = state_paths().root / "deployed.sha256"
    if marker.exists() and marker.read_text() == digest and _deployments_exist():
        return
    echo("deploying prefect.yaml ...")
    result = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
                            cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        from yoloq.errors import UserError

        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise UserError("prefect.yaml", "deployment failed: " + " | ".join(tail),
                        "check prefect.yaml and the flows' imports")
    marker.write_text(digest)


def _deployments_exist() -> bool:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from yoloq.settings import JOB_DEPLOYMENT, SEGMENT_DEPLOYMENT

    with get_client(sync_client=True) as client:
        try:
            for name in (JOB_DEPLOYMENT, SEGMENT_DEPLOYMENT):
                client.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


def recover_interrupted(echo=print, *, root=None, runner_alive: bool = False,
                        worker_alive: bool = False) -> int:
    """Runs left mid-flight whose process is really gone: segments -> Crashed, parents ->
    Scheduled again (a rescheduled parent re-reads the job's progress from the checkpoint
    store and queues the rest, so it loses at most the epoch in progress).

    A run whose process is alive is never touched: a live parent keeps its job (resetting it
    would start a second parent), and a live segment is left to the GPU worker (a restarted
    worker stops the segments a previous one left). A run with no recorded process is gone
    only when the service that starts its kind (`runner_alive`, `worker_alive`) is down.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter, DeploymentFilterName, FlowRunFilter, FlowRunFilterState,
        FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed, Scheduled

    root = str(root or state_paths().root)
    active = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
        any_=[StateType.RUNNING, StateType.PENDING, StateType.CANCELLING])))
    kinds = (("train-segment", worker_alive, lambda: Crashed(
                 message="its process is gone; the job resumes from its last checkpoint")),
             ("yolo-job", runner_alive, lambda: Scheduled(
                 message="its process is gone; resuming the job")))
    recovered = 0
    with get_client(sync_client=True) as client:
        for deployment, starter_alive, new_state in kinds:
            runs = client.read_flow_runs(flow_run_filter=active, deployment_filter=DeploymentFilter(
                name=DeploymentFilterName(any_=[deployment])))
            for run in runs:
                if deployment == "train-segment" and not _started_here(run, starter_alive):
                    continue  # another node's segment: its own worker looks after it
                if not process_gone(run.infrastructure_pid, root, starter_alive):
                    continue
                client.set_flow_run_state(run.id, new_state(), force=True)
                recovered += 1
    if recovered:
        echo(f"recovered {recovered} interrupted run(s)")
    return recovered


def _started_here(run, worker_alive: bool) -> bool:
    """A segment this node's worker started (its PID file is in this state folder), or one
    not started at all while this node's worker is down."""
    pid_file = state_paths().pids / "segments" / f"{run.id}.pid"
    return pid_file.exists() or (not run.infrastructure_pid and not worker_alive)


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

"""Pools, tier queues and deployments on the server (recovery of interrupted runs: flows.recovery)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from flows.recovery import process_gone, recover_interrupted  # noqa: F401 (used by `yoloq up`)
from yoloq.base.paths import PROJECT_DIR, state_paths
from yoloq.base.names import GPU_POOL, JOBS_POOL
from yoloq.domain.tiers import Tier


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
        from yoloq.base.errors import UserError

        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise UserError("prefect.yaml", "deployment failed: " + " | ".join(tail),
                        "check prefect.yaml and the flows' imports")
    marker.write_text(digest)


def _deployments_exist() -> bool:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from yoloq.base.names import JOB_DEPLOYMENT, SEGMENT_DEPLOYMENT

    with get_client(sync_client=True) as client:
        try:
            for name in (JOB_DEPLOYMENT, SEGMENT_DEPLOYMENT):
                client.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


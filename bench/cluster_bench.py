"""Reading a pool's state from Prefect for bench/cluster.py (runs, node records, stats)."""

from __future__ import annotations

import time
from typing import Any


def _sync(coro_fn):
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def run():
        async with get_client() as client:
            return await coro_fn(client)

    return run_coro_as_sync(run())


def live_node_names() -> list[str]:
    from work_pools.nodes import read_nodes

    now = time.time()
    return [n.name for n in _sync(read_nodes) if n.alive(now)]


def job_states(job_ids: list[str]) -> dict[str, str]:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import _runs
    from yoloq.base.settings import JOB_DEPLOYMENT

    with get_client(sync_client=True) as client:
        runs = {r.name: r for r in _runs(client, JOB_DEPLOYMENT, limit=200)}
    return {j: (runs[j].state.name if j in runs and runs[j].state else "?") for j in job_ids}


def segment_records(job_ids: list[str]) -> list[dict[str, Any]]:
    """Every started segment of the jobs: job, team, node, start, end, preemption labels."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    wanted, found = set(job_ids), []
    with get_client(sync_client=True) as client:
        for job_id in wanted:
            for seg in segments_of(client, job_id):
                if seg.start_time is None:
                    continue
                labels = seg.labels or {}
                plan = (seg.parameters or {}).get("plan") or {}
                found.append({"job": job_id, "team": plan.get("team"), "node": labels.get("yoloq.node"),
                              "start": seg.start_time.timestamp(),
                              "end": (seg.end_time or seg.start_time).timestamp(),
                              "asked": labels.get("yoloq.preempt") == "requested",
                              "preempted_by": labels.get("yoloq.preempted_by")})
    return found


def trainings(job_id: str) -> dict[int, int]:
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    return trainings_per_epoch(epoch_trainings(job_id))


def scheduler_stats() -> dict[str, Any]:
    from prefect.variables import Variable

    value = Variable.get("yoloq-scheduler-stats", default=None)
    return value if isinstance(value, dict) else {}

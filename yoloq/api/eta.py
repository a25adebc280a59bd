"""A provisional ETA for a job just submitted, from the queue board's own model.

The job has no segment yet (its parent flow creates it a moment later), so the pool is
read as the scheduler reads it (live nodes, open segment runs, usage from finished ones)
with the job's first segment added as its parent will plan it (`work_pools.segments.segment_plan`). The
policy's `decide` runs once over that snapshot, writing nothing; the job starts now if it
would be admitted, else the board's forward run (`work_pools.policy.eta.estimate`) gives
its start with an 80% interval. The board replaces this estimate once it has planned the
job (calibrated from the queue's history when enough starts exist).
"""

from __future__ import annotations

import datetime
import time
import uuid
from types import SimpleNamespace
from typing import Any

PROVISIONAL_NOTE = ("provisional: the board's forward run at submit time; GET /v1/queue gives "
                    "the board's own ETA once the scheduler has planned the job")


def provisional_eta(spec: Any, analysis: dict[str, Any], job_id: str,
                    now: float | None = None) -> dict[str, Any] | None:
    """{position, eta} of the job's first segment in the pool as it stands, or None when it
    fits no live GPU (no node yet, or none large enough)."""
    from work_pools.board import admitted_snapshot
    from work_pools.policy.eta import Eta, estimate
    from work_pools.scheduling import WorkerPolicy
    from yoloq.service.connection import stack_client

    now = now or time.time()
    new = _first_segment(spec, analysis, job_id, now)
    with stack_client() as client:
        worker_policy = WorkerPolicy.from_env()
        decision = _decide_with(client, new, worker_policy, now)
    sid = str(new.flow_run_id)
    if decision is None or decision.snapshot is None:
        return None
    if any(a.segment_id == sid for a in decision.raw.admit):
        return {"position": 1, "eta": eta_answer(Eta(sid, 1, now, now, now), now)}
    after = admitted_snapshot(decision.snapshot, decision.raw, now)
    found = estimate(after, worker_policy.policy, now, only=[sid]).get(sid)
    return None if found is None else {"position": found.position, "eta": eta_answer(found, now)}


def eta_answer(eta: Any, now: float) -> dict[str, Any]:
    """The answer's `eta`: median start and its 80% interval (Unix times and ISO), the board's
    text for it, and how it was made."""
    from work_pools.board import eta_text

    mid, low, high = eta.start_s, eta.start_low_s, eta.start_high_s
    return {"median_s": mid, "low_s": low, "high_s": high, "median_at": _iso(mid),
            "low_at": _iso(low), "high_at": _iso(high),
            "text": eta_text(mid - now, low - now, high - now),
            "basis": "forward run", "provisional": True, "note": PROVISIONAL_NOTE}


def _first_segment(spec: Any, analysis: dict[str, Any], job_id: str, now: float):
    """The view the scheduler will have of the job's first segment."""
    from work_pools.segments import segment_plan, segment_view

    at = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    plan = segment_plan(spec, analysis, 0, now)
    run = SimpleNamespace(id=uuid.uuid4(), name=f"{job_id}-provisional", labels={},
                          parameters={"plan": plan.to_dict(), "spec": spec.model_dump(), "job_id": job_id},
                          expected_start_time=at, created=at)
    return segment_view(run)


def _decide_with(client: Any, new: Any, worker_policy: Any, now: float):
    """The decision a scheduler pass would take now with `new` waiting (nothing written)."""
    from work_pools.pool_scheduler import PoolGpus, plan_pass, split_open_runs
    from yoloq.api.metrics import open_pool_runs
    from yoloq.api.web_data import segment_intervals
    from yoloq.service.admission import live_nodes

    nodes = live_nodes(client)
    if not nodes:
        return None
    pool_gpus = PoolGpus.of(nodes)
    occupying, pending = split_open_runs(open_pool_runs(client, scheduled=True),
                                         {n.name for n in nodes}, [], now)
    return plan_pass(pool_gpus, occupying, pending, segment_intervals(now), worker_policy, now,
                     extra_pending=(new,)).decision


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")

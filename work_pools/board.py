"""The queue board: a Prefect table artifact the worker refreshes when the queue changes.

One row per segment: running ones first (position 0), then the waiting ones in
the order the policy would start them, each with its reason and an estimated
start with an 80% interval (`work_pools.policy.eta.estimate`). `segment` is the
flow run name, the key `yoloq queue` joins on. ETA columns: `eta` reads
"in 5m (3m-9m)" (relative to `published_at`), `eta_at` is the median start (ISO,
UTC) and `eta_s`/`eta_low`/`eta_high` are Unix times, rounded to the minute.
The board is only republished when a row changes, and times are compared at
that rounding, so an idle queue does not write an artifact every poll.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from typing import Any

from work_pools.policy.eta import Eta, estimate
from work_pools.policy.model import Decision, Policy, Snapshot

BOARD_KEY = "yoloq-queue-board"
ETA_ROUND_S = 60.0
_last: dict[str, tuple[str, str, float]] = {}  # worker -> (content, with text, published at)


async def publish_if_changed(worker: Any, decision: Any, now: float) -> bool:
    """Publish the board when a row changed (times compared rounded to the minute); the
    relative "in 5m" text alone refreshes it at most once a minute."""
    rows = board_rows(worker, decision, now)
    state = board_state(rows, now)
    if not should_publish(_last.get(worker.name), state):
        return False
    table = [{**row, "published_at": _iso(now)} for row in rows] or [
        {"job": "(queue empty)", "published_at": _iso(now)}]
    await _create_table_artifact(table, f"yoloq queue on worker {worker.name}: running and "
                                        "waiting segments, reasons and estimated starts")
    _last[worker.name] = state
    return True


def board_state(rows: list[dict[str, Any]], now: float) -> tuple[str, str, float]:
    """(rows without the relative text, rows with it, when): what publishing compares."""
    content = [{k: v for k, v in row.items() if k != "eta"} for row in rows]
    return (json.dumps(content, sort_keys=True, default=str),
            json.dumps(rows, sort_keys=True, default=str), now)


def should_publish(last: tuple[str, str, float] | None, new: tuple[str, str, float]) -> bool:
    if last is None or new[0] != last[0]:
        return True
    return new[1] != last[1] and new[2] - last[2] >= ETA_ROUND_S


async def _create_table_artifact(table: list[dict[str, Any]], description: str) -> None:
    """Through the API client: the worker publishes outside any flow run, where
    `prefect.artifacts.create_table_artifact` is deprecated."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    async with get_client() as client:
        await client.create_artifact(ArtifactCreate(
            key=BOARD_KEY, type="table", description=description, data=json.dumps(table)))


def board_rows(worker: Any, decision: Any, now: float) -> list[dict[str, Any]]:
    """Rows for `decision` (a WorkerDecision with `snapshot` and `views`)."""
    raw: Decision = decision.raw
    snapshot: Snapshot | None = getattr(decision, "snapshot", None)
    views = dict(getattr(decision, "views", {}) or {})
    views.update({str(v.flow_run_id): v for v in worker._running_views()})
    if snapshot is None:
        return _rows_without_snapshot(worker, raw)
    after = admitted_snapshot(snapshot, raw, now)
    policy: Policy = worker._policy.policy
    etas = estimate(after, policy, now, only=[s.id for s in after.waiting])
    rows = [_running_row(seg, views.get(seg.id), raw) for seg in after.running]
    rows += _waiting_rows(after, raw, etas, views, now)
    return rows


def admitted_snapshot(snapshot: Snapshot, decision: Decision, now: float) -> Snapshot:
    """The queue once `decision` is applied: admitted segments run on their GPUs."""
    admitted = {a.segment_id: a for a in decision.admit}
    started = tuple(replace(seg, gpu_indices=admitted[seg.id].gpu_indices, started_at=now)
                    for seg in snapshot.waiting if seg.id in admitted)
    waiting = tuple(seg for seg in snapshot.waiting if seg.id not in admitted)
    return replace(snapshot, running=snapshot.running + started, waiting=waiting)


def _running_row(seg: Any, view: Any, decision: Decision) -> dict[str, Any]:
    stopping = next((p.reason for p in decision.preempt if p.segment_id == seg.id), None)
    if stopping is None and seg.stopping:
        stopping = "preemption requested"
    reason = f"stopping at next epoch: {stopping}" if stopping else "running"
    return {**_identity(seg, view), "state": "running", "position": 0,
            "gpus": ",".join(str(i) for i in seg.gpu_indices), "reason": reason,
            "eta": "", "eta_at": "", "eta_s": None, "eta_low": None, "eta_high": None}


def _waiting_rows(snapshot: Snapshot, decision: Decision, etas: dict[str, Eta],
                  views: dict[str, Any], now: float) -> list[dict[str, Any]]:
    order = sorted(snapshot.waiting, key=lambda s: (etas[s.id].position if s.id in etas
                                                    else 10**9, s.submitted_at, s.id))
    rows = []
    for position, seg in enumerate(order, start=1):
        eta = etas.get(seg.id)
        rows.append({**_identity(seg, views.get(seg.id)), "state": "waiting",
                     "position": position, "gpus": "",
                     "reason": decision.waiting.get(seg.id, "waiting"), **eta_fields(eta, now)})
    return rows


def _identity(seg: Any, view: Any) -> dict[str, Any]:
    return {"job": seg.job_id, "segment": view.name if view is not None else seg.id,
            "team": seg.team, "tier": seg.tier.label, "epoch": f"{seg.epoch}/{seg.epochs}"}


def eta_fields(eta: Eta | None, now: float) -> dict[str, Any]:
    if eta is None:
        return {"eta": "no estimate", "eta_at": "", "eta_s": None, "eta_low": None,
                "eta_high": None}
    mid, low, high = (_round(t) for t in (eta.start_s, eta.start_low_s, eta.start_high_s))
    return {"eta": eta_text(mid - now, low - now, high - now), "eta_at": _iso(mid),
            "eta_s": mid, "eta_low": low, "eta_high": high}


def eta_text(mid_s: float, low_s: float, high_s: float) -> str:
    """"in 5m (3m-9m)"; "now" when the segment should start within the minute."""
    if high_s < ETA_ROUND_S:
        return "now"
    return f"in {duration(mid_s)} ({duration(low_s)}-{duration(high_s)})"


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90 * 60:
        return f"{round(seconds / 60)}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _round(t: float) -> float:
    return round(t / ETA_ROUND_S) * ETA_ROUND_S


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="minutes")


def _rows_without_snapshot(worker: Any, raw: Decision) -> list[dict[str, Any]]:
    """A decision built elsewhere (no snapshot): positions and reasons, no estimates."""
    rows = [{"job": v.job_id, "segment": v.name, "team": v.team, "tier": v.tier.label,
             "state": "running", "position": 0, "reason": "running"}
            for v in worker._running_views()]
    rows += [{"job": sid, "segment": sid, "state": "waiting", "position": i, "reason": reason}
             for i, (sid, reason) in enumerate(raw.waiting.items(), start=1)]
    return rows

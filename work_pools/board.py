"""The queue board: a Prefect table artifact the worker refreshes when the queue changes.

One row per segment: running ones first (position 0), then the waiting ones in
the order the policy would start them, each with its reason and an estimated
start with an 80% interval: the forward run (`work_pools.policy.eta.estimate`)
calibrated from the queue's own history (`work_pools.policy.eta_tracker`, the
object the simulator scores). The leader records each job's first prediction
and its actual start; the records are kept in the table artifact
`yoloq-eta-history` (prediction vs start, visible in the UI) and read back by a
new leader. `eta_basis` says whether an interval is calibrated ("calibrated"
once 10 similar starts exist) or the raw forward run ("forward run"). `segment` is the
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

from work_pools.policy.calibrate import EtaRecord
from work_pools.policy.eta import Eta, estimate
from work_pools.policy.eta_tracker import EtaTracker
from work_pools.policy.model import Decision, Policy, Snapshot

BOARD_KEY = "yoloq-queue-board"
HISTORY_KEY = "yoloq-eta-history"
HISTORY_ROWS = 2000
HISTORY_EVERY_S = 60.0
ETA_ROUND_S = 60.0
_last: dict[str, tuple[str, str, float]] = {}  # worker -> (content, with text, published at)
_trackers: dict[str, EtaTracker] = {}  # pool -> ETA history (the leader's)
_saved: dict[str, tuple[int, float]] = {}  # pool -> (records saved, when)


async def publish_if_changed(client: Any, worker: Any, decision: Any, now: float) -> bool:
    """Publish the board when a row changed (times compared rounded to the minute); the
    relative "in 5m" text alone refreshes it at most once a minute. `client`: the worker's
    own Prefect client (a new one per pass would build a TLS context each time)."""
    if worker.name not in _trackers:
        restore_history(tracker_for(worker.name, worker._policy.policy, 1),
                        await _read_history(client))
    rows = board_rows(worker, decision, now)
    await _save_history(client, worker.name, now)
    state = board_state(rows, now)
    if not should_publish(_last.get(worker.name), state):
        return False
    table = [{**row, "published_at": _iso(now)} for row in rows] or [
        {"job": "(queue empty)", "published_at": _iso(now)}]
    await _create_table_artifact(client, table, f"yoloq queue on worker {worker.name}: running and "
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


async def _create_table_artifact(client: Any, table: list[dict[str, Any]], description: str) -> None:
    """Through the API client: the worker publishes outside any flow run, where
    `prefect.artifacts.create_table_artifact` is deprecated."""
    from prefect.client.schemas.actions import ArtifactCreate

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
    tracker = tracker_for(worker.name, policy, len(after.gpus))
    follow(tracker, after, now)
    raws = estimate(after, policy, now, only=[s.id for s in after.waiting])
    etas = tracker.show(after, raws, now)
    rows = [_running_row(seg, views.get(seg.id), raw) for seg in after.running]
    basis = {sid: "forward run" if etas[sid] is raws[sid] else "calibrated" for sid in etas}
    rows += _waiting_rows(after, raw, etas, views, now, basis)
    return rows


def tracker_for(pool: str, policy: Policy, gpus: int) -> EtaTracker:
    """The pool's ETA tracker (created on first use), following the current policy."""
    tracker = _trackers.setdefault(pool, EtaTracker(policy, gpus))
    tracker.policy, tracker.gpus = policy, max(gpus, tracker.gpus)
    return tracker


def follow(tracker: EtaTracker, snapshot: Snapshot, now: float) -> list[EtaRecord]:
    """Record the first prediction of each job that waits for its first segment, and turn
    predictions into records when their jobs start; forget jobs that left the queue."""
    running = {s.job_id for s in snapshot.running}
    waiting = {s.job_id for s in snapshot.waiting}
    records = [r for job in running & set(tracker.pending)
               if (r := tracker.started(job, now)) is not None]
    for job in set(tracker.pending) - running - waiting:
        del tracker.pending[job]  # cancelled while waiting: no start to score
    new = {s.id for s in snapshot.waiting if s.epoch == 0 and s.job_id not in tracker.pending}
    for seg in snapshot.waiting:
        if seg.id in new:
            tracker.arrived(now, int(seg.tier), seg.gpus * seg.est_remaining_s)
    if new:
        tracker.predict(snapshot, now, new)
    return records


def restore_history(tracker: EtaTracker, rows: list[dict[str, Any]]) -> int:
    """Add saved records (artifact rows) to a fresh tracker; returns how many."""
    count = 0
    for row in rows:
        try:
            tracker.calibrator.add(EtaRecord(int(row["tier"]), float(row["load_s"]),
                                             float(row["predicted_s"]), float(row["actual_s"]),
                                             float(row.get("size_s", 0.0)),
                                             float(row.get("arrivals", 1.0))))
            count += 1
        except (KeyError, TypeError, ValueError):
            continue  # a row from another version: skip it
    return count


async def _read_history(client: Any) -> list[dict[str, Any]]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    arts = await client.read_artifacts(
        artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[HISTORY_KEY])),
        sort=ArtifactSort.CREATED_DESC, limit=1)
    if not arts:
        return []
    data = arts[0].data
    rows = json.loads(data) if isinstance(data, str) else data
    return [r for r in rows if isinstance(r, dict)]


async def _save_history(client: Any, pool: str, now: float) -> None:
    """Write the pool's records when new ones exist, at most once a minute."""
    tracker = _trackers.get(pool)
    if tracker is None:
        return
    records = tracker.calibrator.records()
    count, at = _saved.get(pool, (0, 0.0))
    if len(records) == count or now - at < HISTORY_EVERY_S:
        return
    from prefect.client.schemas.actions import ArtifactCreate

    table = [r.__dict__ for r in records[-HISTORY_ROWS:]]
    await client.create_artifact(ArtifactCreate(
        key=HISTORY_KEY, type="table", data=json.dumps(table),
        description="yoloq ETA history: each job's first predicted wait (raw forward run) "
                    "and its actual wait, in seconds; the queue board calibrates from it"))
    _saved[pool] = (len(records), now)


def admitted_snapshot(snapshot: Snapshot, decision: Decision, now: float) -> Snapshot:
    """The queue once `decision` is applied: admitted segments run on their GPUs."""
    admitted = {a.segment_id: a for a in decision.admit}
    started = tuple(replace(seg, gpu_indices=admitted[seg.id].gpu_indices, started_at=now)
                    for seg in snapshot.waiting if seg.id in admitted)
    waiting = tuple(seg for seg in snapshot.waiting if seg.id not in admitted)
    return replace(snapshot, running=snapshot.running + started, waiting=waiting)


def _running_row(seg: Any, view: Any, decision: Decision) -> dict[str, Any]:
    from work_pools.scheduling import past_last_epoch

    asked_for = next((p.reason for p in decision.preempt if p.segment_id == seg.id), None)
    if asked_for is not None:
        reason = f"stopping at next epoch: {asked_for}"
    elif seg.stopping and view is not None and past_last_epoch(view):
        reason = "finishing: its last epoch is done"
    elif seg.stopping:
        reason = "stopping at next epoch: preemption requested"
    else:
        reason = "running"
    return {**_identity(seg, view), "state": "running", "position": 0,
            "gpus": ",".join(str(i) for i in seg.gpu_indices), "reason": reason,
            "eta": "", "eta_at": "", "eta_s": None, "eta_low": None, "eta_high": None}


def _waiting_rows(snapshot: Snapshot, decision: Decision, etas: dict[str, Eta],
                  views: dict[str, Any], now: float,
                  basis: dict[str, str] | None = None) -> list[dict[str, Any]]:
    basis = basis or {}
    order = sorted(snapshot.waiting, key=lambda s: (etas[s.id].position if s.id in etas
                                                    else 10**9, s.submitted_at, s.id))
    rows = []
    for position, seg in enumerate(order, start=1):
        eta = etas.get(seg.id)
        rows.append({**_identity(seg, views.get(seg.id)), "state": "waiting",
                     "position": position, "gpus": "",
                     "reason": decision.waiting.get(seg.id, "waiting"), **eta_fields(eta, now),
                     "eta_basis": basis.get(seg.id, "")})
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

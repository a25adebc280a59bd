"""The queue as users see it: running first, then waiting in the order the worker
would admit them, each with the reason it waits and its estimated start (from the
worker's queue board: an 80% interval calibrated from the queue's own history;
`eta_basis` says "calibrated" or "forward run" while too few starts exist)."""

from __future__ import annotations

from typing import Any

from yoloq.domain.tiers import Tier


def queue_rows(client: Any) -> list[dict[str, Any]]:
    from work_pools.segments import segment_view
    from yoloq.records.jobs import active_segments

    board = _board(client)
    views = [(segment_view(r), r) for r in active_segments(client)]
    running = [(v, r) for v, r in views if r.state and r.state.type.value in ("RUNNING", "PENDING",
                                                                               "CANCELLING")]
    waiting = [(v, r) for v, r in views if (v, r) not in running]
    waiting.sort(key=lambda vr: (board.get(vr[1].name, {}).get("position", 10**6),
                                 int(vr[0].tier), vr[0].queued_at))
    rows = [_row(v, r, "running", 0, board) for v, r in running]
    rows += [_row(v, r, "waiting", i, board) for i, (v, r) in enumerate(waiting, start=1)]
    return rows


def _row(view, run, state: str, position: int, board: dict[str, dict]) -> dict[str, Any]:
    entry = board.get(run.name, {})
    reason = "running" if state == "running" else entry.get("reason", "waiting for the worker")
    if state == "running" and view.labels.get("yoloq.preempt") == "requested":
        from yoloq.views.timeline import without_epoch_claim

        reason = f"stopping at next epoch: {without_epoch_claim(view.labels.get('yoloq.preempt_reason', ''))}"
    return {"position": position, "job": view.job_id, "segment": run.name, "team": view.team,
            "tier": Tier(view.tier).label, "state": state, "epoch":
            f"{view.progress_epoch}/{view.epochs}", "eta": entry.get("eta", ""),
            "eta_low": entry.get("eta_low"), "eta_high": entry.get("eta_high"),
            "eta_basis": entry.get("eta_basis", ""), "reason": reason}


def _board(client: Any) -> dict[str, dict]:
    """Latest queue board rows by segment name (empty when the worker has not published)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from work_pools.board import BOARD_KEY

    try:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            any_=[BOARD_KEY])), sort=ArtifactSort.CREATED_DESC, limit=1)
    except Exception:
        return {}
    if not arts:
        return {}
    data = arts[0].data
    import json

    rows = json.loads(data) if isinstance(data, str) else data
    return {r.get("segment"): r for r in rows if isinstance(r, dict) and r.get("segment")}

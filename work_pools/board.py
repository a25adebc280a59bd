"""The queue board: a Prefect table artifact the worker refreshes when the queue changes."""

from __future__ import annotations

import json
from typing import Any

BOARD_KEY = "yoloq-queue-board"
_last: dict[str, str] = {}


async def publish_if_changed(worker: Any, decision: Any, now: float) -> None:
    rows = board_rows(worker, decision)
    digest = json.dumps(rows, sort_keys=True, default=str)
    if _last.get(worker.name) == digest:
        return
    from prefect.artifacts import acreate_table_artifact

    await acreate_table_artifact(table=rows or [{"job": "(queue empty)"}], key=BOARD_KEY,
                                 description="yoloq queue: running and waiting segments")
    _last[worker.name] = digest


def board_rows(worker: Any, decision: Any) -> list[dict[str, Any]]:
    rows = []
    for view in worker._running_views():
        rows.append({"job": view.job_id, "team": view.team, "tier": view.tier.label,
                     "state": "running", "position": 0, "epoch": view.progress_epoch,
                     "reason": "running"})
    waiting = sorted(decision.waiting.items(), key=lambda kv: str(kv[0]))
    for position, (flow_run_id, reason) in enumerate(waiting, start=1):
        rows.append({"job": str(flow_run_id), "state": "waiting", "position": position,
                     "reason": reason})
    return rows

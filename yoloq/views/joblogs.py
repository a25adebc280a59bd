"""A job's training log: the Prefect flow-run logs of its parent run and every segment run
(the segment's `get_run_logger` lines and printed output: epochs, checkpoints, preemption),
in time order. Read by `yoloq logs` on the server host and by `GET /v1/jobs/{id}/logs`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from yoloq.domain.contract import job_tag

PAGE = 200  # the Prefect API's page size for logs
LOOKBACK = timedelta(seconds=15)  # logs reach the server in batches: a late line is still seen
DRAIN_S = 10.0  # --follow reads on this long after the job ended: a segment's last lines come later


def job_runs(client: Any, job_id: str) -> list[Any]:
    """The job's parent run and its segment runs (all tagged `job:<id>`), oldest first."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.client.schemas.sorting import FlowRunSort

    return client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(
        all_=[job_tag(job_id)])), sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=PAGE)


def job_log(client: Any, job_id: str, after: datetime | None = None) -> dict[str, Any] | None:
    """{"job_id", "finished", "ended", "lines": [{"id", "time", "run", "level", "message"}]}, the
    lines at or after `after` ("ended": the parent run's ISO end time, or None); None when no
    job has this id."""
    runs = job_runs(client, job_id)
    parent = next((r for r in runs if r.name == job_id), None)
    if parent is None:
        return None
    names = {r.id: r.name for r in runs}
    lines = [_line(log, names) for log in _logs(client, list(names), after)]
    finished = bool(parent.state and parent.state.is_final())
    ended = parent.end_time.isoformat() if finished and parent.end_time else None
    return {"job_id": job_id, "team": ((parent.parameters or {}).get("spec") or {}).get("team"),
            "finished": finished, "ended": ended, "lines": lines}


def _logs(client: Any, run_ids: list[Any], after: datetime | None) -> list[Any]:
    from prefect.client.schemas.filters import (
        LogFilter,
        LogFilterFlowRunId,
        LogFilterTimestamp,
    )
    from prefect.client.schemas.sorting import LogSort

    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids),
                    timestamp=LogFilterTimestamp(after_=after) if after else None)
    found: list[Any] = []
    while True:
        page = client.read_logs(log_filter=flt, sort=LogSort.TIMESTAMP_ASC, limit=PAGE, offset=len(found))
        found.extend(page)
        if len(page) < PAGE:
            return found


def _line(log: Any, names: dict[Any, str]) -> dict[str, Any]:
    return {"id": str(log.id), "time": log.timestamp.isoformat(), "run": names.get(log.flow_run_id, "?"),
            "level": logging.getLevelName(log.level), "message": log.message}


def format_line(line: dict[str, Any]) -> str:
    return f"{line['time'][:19].replace('T', ' ')}  {line['run']}  {line['level']:<7} {line['message']}"


def follow(fetch: Callable[[datetime | None], dict[str, Any]], interval_s: float = 2.0,
           follow_on: bool = True, drain_s: float = DRAIN_S) -> Iterator[dict[str, Any]]:
    """Each line once, in order, from `fetch(after)` (local or remote); with `follow_on`, keep
    asking every `interval_s` until a read that began `drain_s` or more after the job ended
    (by the page's "ended" time; else since this loop first saw it finished). A segment's log
    lines reach the server in batches, seconds after they were written: CI saw "epoch 1 done"
    missing from a follow that stopped 3 s after the job ended. A job that ended longer ago
    than `drain_s` is read once."""
    seen: set[str] = set()
    after: datetime | None = None
    finished_at: float | None = None  # time.monotonic() of the job's end
    while True:
        read_at = time.monotonic()
        page = fetch(after)
        for line in page["lines"]:
            if line["id"] not in seen:
                seen.add(line["id"])
                yield line
        if page["lines"]:
            after = datetime.fromisoformat(page["lines"][-1]["time"]) - LOOKBACK
        if page["finished"] and finished_at is None:
            finished_at = time.monotonic() - _ended_ago(page.get("ended"))
        if not follow_on or (finished_at is not None and read_at - finished_at >= drain_s):
            return
        time.sleep(interval_s)


def _ended_ago(ended: str | None) -> float:
    """Seconds since the job ended by the page's "ended" time (0: unknown, a server without it,
    or a clock behind the server's)."""
    if not ended:
        return 0.0
    return max(0.0, (datetime.now(timezone.utc) - datetime.fromisoformat(ended)).total_seconds())

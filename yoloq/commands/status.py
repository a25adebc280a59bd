"""`yoloq status [JOB] [--json] [--watch]`: jobs, their state and epoch progress (this host's
stack, or the configured yoloq server)."""

from __future__ import annotations

import argparse
from typing import Any

from yoloq.commands._client import (
    add_table_arguments,
    add_watch_arguments,
    backend,
    print_json,
    print_json_lines,
    watch,
)
from yoloq.base.errors import UserError
from yoloq.views.table import Column, render as render_table

_FIELDS = ("job_id", "team", "tier", "submitted_tier", "state", "epochs", "epochs_done", "segments",
           "preemptions", "flow_run_id", "weights")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="a job id (default: all jobs)")
    add_table_arguments(parser, "JSON: one object for JOB, else one object per job, one per line")
    add_watch_arguments(parser)


COLUMNS = (
    Column("job_id", "JOB", ident=True, priority=0),
    Column("state", priority=1),
    Column("progress", "EPOCHS", priority=1),
    Column("tier", priority=2),
    Column("team", priority=3),
    Column("preemptions", "PREEMPTED", priority=4, right=True),
    Column("segments", priority=5, right=True),
)


def run(args: argparse.Namespace) -> int:
    with backend() as where:
        if args.watch:
            return watch(lambda: render(job_rows(where, args.job), args.wide), args.interval, args.count)
        rows = job_rows(where, args.job)
    if args.json:
        if args.job:
            print_json(rows[0])
        else:
            print_json_lines(rows)
        return 0
    print(render(rows, args.wide))
    return 0


def job_rows(where: Any, job_id: str | None) -> list[dict[str, Any]]:
    """The jobs as `JobView.to_dict()` rows (the service's one view of a job), from the server or
    the local stack; with a job id, its weights location too."""
    if where.remote is not None:
        found = [where.remote.get(f"/jobs/{job_id}")] if job_id else where.remote.get("/jobs")
        rows = [{k: row.get(k) for k in _FIELDS} for row in found]
    else:
        from yoloq.service.jobs import job_views

        rows = [view.to_dict() for view in job_views(where.client, job_id)]
    if job_id and not rows:
        raise UserError("job", f"no job named {job_id!r}", "list jobs with `yoloq status`")
    return rows


def render(rows: list[dict[str, Any]], wide: bool = False) -> str:
    shown = [{**row, "progress": f"{row['epochs_done']}/{row['epochs']}"} for row in rows]
    text = render_table(shown, COLUMNS, wide=wide, empty="(no jobs)")
    weights = rows[0].get("weights") if len(rows) == 1 else None  # read for one job's view only
    if weights:
        what = "final weights (best.pt inside)" if weights.get("finished") else "newest checkpoint"
        text += f"\nweights: {what}, epoch {weights['epoch']}: {weights.get('path') or weights['uri']}"
    return text

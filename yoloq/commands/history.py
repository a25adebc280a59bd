"""`yoloq history JOB [--json]`: the job's timeline from its runs and audit events, with one
`trained` row per epoch training from the epoch ledger (a repeated epoch shows twice) and one
row per change (tier changed, cancel requested) naming who made it (`yoloq.service.jobs.history`).
From this host's stack, or the configured yoloq server (`GET /v1/jobs/{id}`'s history)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import add_table_arguments, backend, print_json_lines
from yoloq.base.errors import UserError
from yoloq.views.table import Column, day_time, render

COLUMNS = (
    Column("time", "TIME (UTC)", priority=1, fmt=day_time),
    Column("what", priority=0),
    Column("detail", priority=2, min_width=20, wrap=True),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job")
    add_table_arguments(parser, "one JSON object per timeline row, one per line")


def run(args: argparse.Namespace) -> int:
    from yoloq.service.jobs import history

    with backend() as where:
        if where.remote is not None:
            rows = where.remote.get(f"/jobs/{args.job}")["history"]
        else:
            rows = history(where.client, args.job)
    if not rows:
        raise UserError("job", f"no job named {args.job!r}", "list jobs with `yoloq status`")
    if args.json:
        print_json_lines(rows)
    else:
        print(render(rows if args.wide else without_job_prefix(rows, args.job), COLUMNS, wide=args.wide))
    return 0


def without_job_prefix(rows: list[dict], job_id: str) -> list[dict]:
    """Segment names shown without the job's own id (`JOB.s2.e3-8` -> `s2.e3-8`): the table is
    that job's already, and the full names would not fit 80 columns. --wide and --json keep them."""
    return [{**row, "detail": str(row.get("detail") or "").replace(f"{job_id}.", "")} for row in rows]


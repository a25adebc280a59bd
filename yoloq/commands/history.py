"""`yoloq history JOB [--json]`: the job's timeline from its runs and audit events, with one
`trained` row per epoch training from the epoch ledger (a repeated epoch shows twice) and one
row per change (tier changed, cancel requested) naming who made it (`yoloq.service.jobs.history`).
From this host's stack, or the configured yoloq server (`GET /v1/jobs/{id}`'s history)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import backend, print_json, table
from yoloq.base.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from yoloq.service.jobs import history

    with backend() as where:
        if where.remote is not None:
            rows = _local_times(where.remote.get(f"/jobs/{args.job}")["history"])
        else:
            rows = history(where.client, args.job)
    if not rows:
        raise UserError("job", f"no job named {args.job!r}", "list jobs with `yoloq status`")
    if args.json:
        print_json(rows)
    else:
        print(table(rows, ["time", "what", "detail"]))
    return 0


def _local_times(rows: list[dict]) -> list[dict]:
    """Times as the local command prints them (datetimes, not the API's ISO strings)."""
    from datetime import datetime

    return [{**row, "time": datetime.fromisoformat(row["time"])} if isinstance(row.get("time"), str) else row
            for row in rows]

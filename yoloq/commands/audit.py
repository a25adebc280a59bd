"""`yoloq audit [--since ISO|1h|2d] [--team T] [--csv]`: the audit log from Prefect events."""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import backend, print_json_lines
from yoloq.service.usage import parse_audit_since as parse_since
from yoloq.views.table import Column, day_time, render

COLUMNS = (
    Column("occurred", "TIME (UTC)", priority=1, fmt=day_time),
    Column("event", priority=0, min_width=13, fmt=lambda e: str(e or "").removeprefix("yoloq.")),
    Column("job", ident=True, priority=0),
    Column("team", priority=3),
    Column("actor", priority=4, min_width=8),
    Column("reason", priority=5, min_width=12, wrap=True),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="7d", help="ISO time or a span like 30m, 12h, 7d")
    parser.add_argument("--team")
    parser.add_argument("--job")
    parser.add_argument("--csv", action="store_true", help="write CSV to stdout (pandas)")
    parser.add_argument("--json", action="store_true", help="one JSON object per event, one per line")
    parser.add_argument("--wide", action="store_true", help="show every column whole, whatever the terminal's width")


def run(args: argparse.Namespace) -> int:
    from yoloq.views.auditlog import read_audit

    since = parse_since(args.since)
    with backend() as where:
        if where.remote is not None:
            rows = where.remote.get("/audit", since=since.isoformat(), team=args.team, job=args.job)
        else:
            rows = read_audit(where.client, since=since, job_id=args.job, team=args.team)
    if args.json:
        print_json_lines(rows)
        return 0
    if args.csv:
        import pandas as pd

        pd.DataFrame(rows, columns=["occurred", "event", "job", "team", "actor", "reason",
                                    "details"]).to_csv(sys.stdout, index=False)
        return 0
    print(render(rows, COLUMNS, wide=args.wide, empty="(no events)"))
    return 0

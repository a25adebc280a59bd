"""`yoloq audit [--since ISO|1h|2d] [--team T] [--csv]`: the audit log from Prefect events."""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import backend, print_json, table
from yoloq.service.usage import parse_audit_since as parse_since


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", default="7d", help="ISO time or a span like 30m, 12h, 7d")
    parser.add_argument("--team")
    parser.add_argument("--job")
    parser.add_argument("--csv", action="store_true", help="write CSV to stdout (pandas)")
    parser.add_argument("--json", action="store_true", help="print the events as a JSON list")


def run(args: argparse.Namespace) -> int:
    from yoloq.views.auditlog import read_audit

    since = parse_since(args.since)
    with backend() as where:
        if where.remote is not None:
            rows = where.remote.get("/audit", since=since.isoformat(), team=args.team, job=args.job)
        else:
            rows = read_audit(where.client, since=since, job_id=args.job, team=args.team)
    if args.json:
        print_json(rows)
        return 0
    if args.csv:
        import pandas as pd

        pd.DataFrame(rows, columns=["occurred", "event", "job", "team", "actor", "reason",
                                    "details"]).to_csv(sys.stdout, index=False)
        return 0
    print(table(rows, ["occurred", "event", "job", "team", "actor", "reason"]))
    return 0

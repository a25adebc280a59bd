"""`yoloq history JOB [--json]`: the job's timeline from its runs and audit events, with one
`trained` row per epoch training from the epoch ledger (a repeated epoch shows twice)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, stack_client, table
from yoloq.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from yoloq.timeline import job_timeline

    with stack_client() as client:
        rows = job_timeline(client, args.job)
    if not rows:
        raise UserError("job", f"no job named {args.job!r}", "list jobs with `yoloq status`")
    if args.json:
        print_json(rows)
    else:
        print(table(rows, ["time", "what", "detail"]))
    return 0

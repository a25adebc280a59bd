"""`yoloq status [JOB] [--json]`: jobs, their state and epoch progress."""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, stack_client, table
from yoloq.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="a job id (default: all jobs)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from yoloq.jobs import list_jobs

    with stack_client() as client:
        jobs = list_jobs(client, args.job)
    if args.job and not jobs:
        raise UserError("job", f"no job named {args.job!r}", "list jobs with `yoloq status`")
    rows = [j.to_dict() for j in jobs]
    if args.json:
        print_json(rows[0] if args.job else rows)
        return 0
    for row in rows:
        row["progress"] = f"{row['epochs_done']}/{row['epochs']}"
    print(table(rows, ["job_id", "team", "tier", "state", "progress", "segments", "preemptions"]))
    return 0

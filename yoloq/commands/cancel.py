"""`yoloq cancel JOB`: cancel a job's parent run and its active segment."""

from __future__ import annotations

import argparse

from yoloq.commands._client import backend, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("--reason", default="cancelled by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.service import jobs

    with backend() as where:
        if where.remote is not None:
            result = where.remote.delete(f"/jobs/{args.job}", reason=args.reason)
        else:
            result = jobs.cancel(where.client, jobs.find(where.client, args.job), args.reason).to_dict()
    if args.json:
        print_json(result)
        return 0
    print(f"cancelling {result['job_id']} ({len(result['cancelling_runs'])} run(s))")
    return 0

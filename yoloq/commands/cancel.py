"""`yoloq cancel JOB`: cancel a job's parent run and its active segment. A job that has already
ended is left as it is: one line saying so (`already ended: Completed`) and exit code 1."""

from __future__ import annotations

import argparse

from yoloq.base.errors import AlreadyDone
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
            if not result["cancelling_runs"]:
                raise already_ended(result["job_id"], where.remote.get(f"/jobs/{args.job}")["state"])
        else:
            record = jobs.find(where.client, args.job)
            done = jobs.cancel(where.client, record, args.reason)
            if not done.cancelling_runs:
                raise already_ended(record.job_id, record.state)
            result = done.to_dict()
    if args.json:
        print_json(result)
        return 0
    print(f"cancelling {result['job_id']} ({len(result['cancelling_runs'])} run(s))")
    return 0


def already_ended(job_id: str, state: str) -> AlreadyDone:
    return AlreadyDone("job", f"{job_id} already ended: {state}; nothing to cancel",
                       f"see what happened with `yoloq history {job_id}`")

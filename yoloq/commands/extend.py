"""`yoloq extend JOB --epochs N`: raise a job's total to N epochs (queued, running, preempted or
completed); it trains on from its newest checkpoint, in one MLflow run."""

from __future__ import annotations

import argparse

from yoloq.commands._client import change_job, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("--epochs", type=int, required=True, help="the new total (more than now)")
    parser.add_argument("--reason", default="extended by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.service import jobs

    result = change_job(args.job, "epochs", {"epochs": args.epochs, "reason": args.reason},
                        lambda client, run: jobs.extend(client, run, args.epochs, args.reason))
    if args.json:
        print_json(result)
        return 0
    then = "queued again, training on" if result["restarted"] else "trains on"
    print(f"{result['job_id']}: {result['old_epochs']} -> {result['new_epochs']} epochs "
          f"({result['epochs_done']} done; {then} from its newest checkpoint)")
    return 0

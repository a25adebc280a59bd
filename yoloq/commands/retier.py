"""`yoloq retier JOB TIER [--reason R]`: move a job to another tier (waiting or future segments)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import change_job, print_json
from yoloq.domain.tiers import TIER_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("tier", choices=TIER_NAMES)
    parser.add_argument("--reason", default="changed by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.service import jobs

    result = change_job(args.job, "tier", {"tier": args.tier, "reason": args.reason},
                        lambda client, run: jobs.retier(client, run, args.tier, args.reason))
    if args.json:
        print_json(result)
        return 0
    print(f"{result['job_id']}: {result['old_tier']} -> {result['new_tier']}")
    return 0

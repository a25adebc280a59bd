"""`yoloq retier JOB TIER [--reason R]`: move a job to another tier (waiting or future segments)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, stack_client
from yoloq.errors import UserError
from yoloq.tiers import TIER_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("tier", choices=TIER_NAMES)
    parser.add_argument("--reason", default="changed by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from work_pools.segments import TIER_LABEL
    from yoloq.events import emit_job_event
    from yoloq.jobs import find_job
    from yoloq.policy_config import check_submit_allowed

    with stack_client() as client:
        job = find_job(client, args.job)
        if job.flow_run.state and job.flow_run.state.is_final():
            raise UserError("job", f"{job.job_id} has ended ({job.state})", "retier a queued or running job")
        spec = _spec_of(job).model_copy(update={"priority": args.tier})
        check_submit_allowed(spec)
        runs = [job.flow_run, *(s for s in job.segments if s.state and not s.state.is_final())]
        for run_ in runs:
            client.update_flow_run_labels(run_.id, {TIER_LABEL: args.tier})
        emit_job_event("tier_changed", job.job_id, job.team, reason=args.reason,
                       old_tier=job.tier, new_tier=args.tier)
    if args.json:
        print_json({"job_id": job.job_id, "old_tier": job.tier, "new_tier": args.tier, "reason": args.reason})
        return 0
    print(f"{job.job_id}: {job.tier} -> {args.tier}")
    return 0


def _spec_of(job):
    from yoloq.spec import parse_spec

    return parse_spec((job.flow_run.parameters or {}).get("spec") or {})

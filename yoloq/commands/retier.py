"""`yoloq retier JOB TIER [--reason R]`: move a job to another tier (waiting or future segments)."""

from __future__ import annotations

import argparse

from yoloq.commands._client import backend, print_json
from yoloq.base.errors import UserError
from yoloq.domain.tiers import TIER_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("tier", choices=TIER_NAMES)
    parser.add_argument("--reason", default="changed by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.records.jobs import find_job
    from yoloq.records.policy_config import check_submit_allowed

    with backend() as where:
        if where.remote is not None:
            result = where.remote.post(f"/jobs/{args.job}/tier", {"tier": args.tier, "reason": args.reason})
        else:
            job = find_job(where.client, args.job)
            check_open(job)
            check_submit_allowed(retiered_spec(job, args.tier))
            apply_tier(where.client, job, args.tier, args.reason)
            result = {"job_id": job.job_id, "old_tier": job.tier, "new_tier": args.tier, "reason": args.reason}
    if args.json:
        print_json(result)
        return 0
    print(f"{result['job_id']}: {result['old_tier']} -> {result['new_tier']}")
    return 0


def check_open(job) -> None:
    """A job that has ended keeps its tier (a one-line error)."""
    if job.flow_run.state and job.flow_run.state.is_final():
        raise UserError("job", f"{job.job_id} has ended ({job.state})", "retier a queued or running job")


def retiered_spec(job, tier: str):
    """The job's spec at the new tier (to check against the team's cap)."""
    return _spec_of(job).model_copy(update={"priority": tier})


def apply_tier(client, job, tier: str, reason: str) -> None:
    """Label the parent and its live segments with the new tier and record the event.
    Shared by `yoloq retier` and `POST /v1/jobs/{id}/tier` (both check first)."""
    from work_pools.segments import TIER_LABEL
    from yoloq.records.events import emit_job_event

    runs = [job.flow_run, *(s for s in job.segments if s.state and not s.state.is_final())]
    for run_ in runs:
        client.update_flow_run_labels(run_.id, {TIER_LABEL: tier})
    emit_job_event("tier_changed", job.job_id, job.team, reason=reason, old_tier=job.tier, new_tier=tier)


def _spec_of(job):
    from yoloq.domain.spec import parse_spec

    return parse_spec((job.flow_run.parameters or {}).get("spec") or {})

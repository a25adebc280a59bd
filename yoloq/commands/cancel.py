"""`yoloq cancel JOB`: cancel a job's parent run and its active segment."""

from __future__ import annotations

import argparse

from yoloq.commands._client import backend, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("--reason", default="cancelled by user")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.records.jobs import find_job

    with backend() as where:
        if where.remote is not None:
            result = where.remote.delete(f"/jobs/{args.job}", reason=args.reason)
        else:
            job = find_job(where.client, args.job)
            targets = cancel_job(where.client, job, args.reason)
            result = {"job_id": job.job_id, "cancelling_runs": [str(r.id) for r in targets],
                      "reason": args.reason}
    if args.json:
        print_json(result)
        return 0
    print(f"cancelling {result['job_id']} ({len(result['cancelling_runs'])} run(s))")
    return 0


def cancel_job(client, job, reason: str) -> list:
    """Set the job's live runs (the parent, then its segments) Cancelling and record the event;
    returns the runs. Shared by `yoloq cancel` and `DELETE /v1/jobs/{id}`.

    The parent goes first: a segment cancelled first ends within milliseconds, its parent then
    ends Cancelled, and a forced Cancelling written after that left the parent Cancelling for
    good (seen in CI: `test_submit_bulk`'s sweep waited 240 s for a parent the runner had ended)."""
    from prefect.states import Cancelling

    from yoloq.records.events import emit_job_event

    targets = [job.flow_run] if job.flow_run.state and not job.flow_run.state.is_final() else []
    targets += [s for s in job.segments if s.state and not s.state.is_final()]
    for run_ in targets:
        client.set_flow_run_state(run_.id, Cancelling(message=reason), force=True)
    emit_job_event("cancelled", job.job_id, job.team, reason=reason)
    return targets

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
    from yoloq.records.jobs import find_job

    with backend() as where:
        if where.remote is not None:
            result = where.remote.delete(f"/jobs/{args.job}", reason=args.reason)
            if not result["cancelling_runs"]:
                raise already_ended(result["job_id"], where.remote.get(f"/jobs/{args.job}")["state"])
        else:
            job = find_job(where.client, args.job)
            targets = cancel_job(where.client, job, args.reason)
            if not targets:
                raise already_ended(job.job_id, job.state)
            result = {"job_id": job.job_id, "cancelling_runs": [str(r.id) for r in targets],
                      "reason": args.reason}
    if args.json:
        print_json(result)
        return 0
    print(f"cancelling {result['job_id']} ({len(result['cancelling_runs'])} run(s))")
    return 0


def already_ended(job_id: str, state: str) -> AlreadyDone:
    return AlreadyDone("job", f"{job_id} already ended: {state}; nothing to cancel",
                       f"see what happened with `yoloq history {job_id}`")


def cancel_job(client, job, reason: str) -> list:
    """Set the job's live runs (the parent, then its segments) Cancelling and record the event
    (none when no run was live: nothing was cancelled); returns the runs. Shared by `yoloq cancel` and `DELETE /v1/jobs/{id}`.

    The parent goes first: a segment cancelled first ends within milliseconds, its parent then
    ends Cancelled, and a forced Cancelling written after that left the parent Cancelling for
    good (seen in CI: `test_submit_bulk`'s sweep waited 240 s for a parent the runner had ended)."""
    from prefect.states import Cancelling

    from yoloq.records.events import emit_job_event

    targets = [job.flow_run] if job.flow_run.state and not job.flow_run.state.is_final() else []
    targets += [s for s in job.segments if s.state and not s.state.is_final()]
    for run_ in targets:
        client.set_flow_run_state(run_.id, Cancelling(message=reason), force=True)
    if targets:
        emit_job_event("cancelled", job.job_id, job.team, reason=reason)
    return targets

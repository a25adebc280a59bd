"""`yoloq submit SPEC [--json]`: analyse locally, then create the job's `yolo-job` run."""

from __future__ import annotations

import argparse
import secrets

from yoloq.commands._client import print_json, stack_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="job spec file (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.analysis import analyse
    from yoloq.spec import load_spec

    spec = load_spec(args.spec)
    analysis = analyse(spec)  # bad input stops here: no run created, no GPU time
    result = submit_job(spec)
    result["analysis"] = analysis.to_dict()
    if args.json:
        print_json(result)
    else:
        print(f"submitted {result['job_id']} ({spec.team}, {spec.priority}, "
              f"{analysis.job_class}, queue {analysis.queue}); follow it with "
              f"`yoloq status {result['job_id']}`")
    return 0


def submit_job(spec) -> dict:
    """Create the parent run for a validated spec on the running stack."""
    from yoloq.policy_config import check_submit_allowed

    check_submit_allowed(spec)
    with stack_client():
        job_id = create_job_run(spec, reason="yoloq submit")
    return {"job_id": job_id}


def create_job_run(spec, reason: str) -> str:
    """Create the `yolo-job` run (the job) and its audit event; the caller has a Prefect API."""
    from prefect.deployments import run_deployment

    from yoloq.events import emit_job_event
    from yoloq.settings import JOB_DEPLOYMENT

    job_id = f"{spec.name}-{secrets.token_hex(3)}"
    run_deployment(JOB_DEPLOYMENT, parameters={"spec": spec.model_dump(), "job_id": job_id},
                   flow_run_name=job_id, timeout=0, as_subflow=False,
                   tags=[f"job:{job_id}", f"team:{spec.team}", f"tier:{spec.priority}", "yoloq"])
    emit_job_event("submitted", job_id, spec.team, tier=spec.priority, reason=reason)
    return job_id

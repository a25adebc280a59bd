"""`yoloq submit SPEC [--json] [--gpu NAME]`: analyse locally, check the fit against the pool,
then create the job's `yolo-job` run."""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from yoloq.commands._client import print_json, stack_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="job spec file (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--gpu", help="GPU type for the estimates; the fit is checked against it only "
                        "while the pool has no live node")


def run(args: argparse.Namespace) -> int:
    from yoloq.analysis import analyse
    from yoloq.spec import load_spec

    spec = load_spec(args.spec)
    analysis = analyse(spec, gpu=args.gpu)  # bad input stops here: no run created, no GPU time
    result = submit_job(spec, analysis=analysis, gpu=args.gpu)
    result["analysis"] = analysis.to_dict()
    if args.json:
        print_json(result)
        return 0
    for note in result["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"submitted {result['job_id']} ({spec.team}, {spec.priority}, "
          f"{analysis.job_class}, queue {analysis.queue}); follow it with "
          f"`yoloq status {result['job_id']}`")
    return 0


def submit_job(spec, analysis=None, gpu: str | None = None) -> dict:
    """Create the parent run for a validated spec on the running stack.

    With an analysis, the job must fit some GPU of the pool's live nodes (at its batch, or at
    the smallest reduced batch the policy allows); else it is refused (UserError).
    """
    from yoloq.policy_config import check_submit_allowed

    check_submit_allowed(spec)
    notes: list[str] = []
    with stack_client():
        fit = check_pool_fit(analysis, gpu, notes) if analysis is not None else None
        job_id = create_job_run(spec, reason="yoloq submit")
    return {"job_id": job_id, "fit": fit, "notes": notes}


def check_pool_fit(analysis, gpu: str | None, notes: list[str]) -> dict[str, Any] | None:
    """Check the analysed job against the live inventory (inside a stack client); raise when it fits nowhere."""
    from yoloq.analysis.fit import check_fit

    pool, source = _pool_gpus(gpu)
    if not pool:
        notes.append("fit not checked: the pool has no live node yet (give --gpu NAME to check against a type)")
        return None
    verdict = check_fit(analysis, pool, _smallest_batch(analysis.batch))
    if verdict.refusal is not None:
        raise verdict.refusal
    if verdict.reduced:
        notes.append(f"batch {analysis.batch} fits no GPU of the pool; it can run with a reduced batch of "
                     f"{verdict.batch} on {verdict.gpu.name} (node {verdict.gpu.node}), which is not exact resume")
    return {"source": source, "node": verdict.gpu.node, "gpu": verdict.gpu.name, "batch": verdict.batch,
            "reduced": verdict.reduced}


def _pool_gpus(gpu: str | None):
    """(GPUs, where they come from): every live node's, else the --gpu type given, else none."""
    from work_pools.nodes import live_pool_gpus
    from yoloq.analysis.fit import PoolGpu

    live = [PoolGpu(node, info.name, info.mem_total_gb) for node, info in live_pool_gpus()]
    if live:
        return live, "live nodes"
    if gpu:
        from yoloq import gpus

        kind = gpus.lookup(gpu)  # already checked by the analysis
        return [PoolGpu("--gpu", kind.name, kind.mem_gb)], "--gpu"
    return [], "none"


def _smallest_batch(batch: int) -> int:
    from blocks.policy import load_policy

    policy = load_policy()
    return max(1, policy.min_reduced_batch) if policy.allow_reduced_batch else batch


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

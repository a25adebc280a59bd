"""`yoloq submit SPEC [SPEC ...] [key=value ...] [--json] [--gpu NAME] [--dry-run] [--keep-going]`:
analyse every job locally, check each against the team's tier cap and the pool, then create the
jobs' `yolo-job` runs: all in this one process, through one Prefect client. One job on the host
of a running stack goes instead to the stack's warm API as its local operator (same checks, same
output, no Prefect import: `yoloq.client.local_stack`).

A SPEC is a job spec or a sweep file (a base spec and a `grid`, see `yoloq.sweep`); `key=value`
overrides apply to every job, the way `yolo train key=value` does. Every job is analysed and
checked before any is created: one bad job stops the batch with nothing created (exit 2, one
line naming the file and field, and the others that are bad), unless `--keep-going`, which
creates the good ones and still exits 2.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from typing import Any

from yoloq.commands._client import stack_client
from yoloq.commands._submit_batch import Job, batch_error, print_job, stop_if_bad
from yoloq.base.errors import UserError


class _Intermixed:
    """Options and positionals in any order (`yoloq submit sweep.yaml --dry-run lr0=0.1`): argparse's
    intermixed parsing for this command's parser, which has no subcommands of its own."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inner:  # argparse's own passes inside parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.__class__ = type("SubmitParser", (_Intermixed, type(parser)), {})
    parser.add_argument("items", nargs="+", metavar="SPEC|key=value",
                        help="job specs and sweep files (a sweep has a `grid` key), and key=value overrides "
                             "for all of them (`epochs=5`, `lr0=0.01` goes under train_args)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per job (one per line)")
    parser.add_argument("--gpu", help="GPU type for the estimates; the fit is checked against it only "
                        "while the pool has no live node")
    parser.add_argument("--dry-run", action="store_true",
                        help="analyse and print the jobs without creating them (no stack needed; the tier "
                             "cap and the pool fit are not checked)")
    parser.add_argument("--keep-going", action="store_true",
                        help="create the good jobs even when some are bad (still exit 2)")


def run(args: argparse.Namespace) -> int:
    from yoloq.domain import sweep
    from yoloq.client.remote import remote
    from yoloq.commands._remote_submit import submit_remote

    paths, overrides = sweep.split_items(args.items)
    jobs = [Job(p.source, spec=p.spec, error=p.error, point=p.point) for p in sweep.plan(paths, overrides)]
    server = None if args.dry_run else remote()
    if server is not None:  # a yoloq server is configured: it analyses, checks and creates
        return submit_remote(args, server, jobs)
    if not args.dry_run and not args.gpu and len(jobs) == 1 and jobs[0].error is None:
        from yoloq.commands._client import local_api

        local = local_api()  # one job: this host's warm API analyses and creates it, no Prefect import
        if local is not None:
            return submit_remote(args, local, jobs)
    for job in jobs:
        analyse_job(job, args.gpu)
    single = len(jobs) == 1
    stop_if_bad(jobs, args.keep_going, single)
    good = [job for job in jobs if job.error is None]
    if args.dry_run:
        for job in good:
            print_job(job, args.json, dry_run=True, single=single)
    else:
        notes = submit_batch(good, args.gpu, args.keep_going, echo=lambda job: print_job(
            job, args.json, dry_run=False, single=single))
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    bad = [job for job in jobs if job.error is not None]
    if bad:  # --keep-going: the good ones went through; say which did not
        raise batch_error(bad, single, created=sum(1 for job in jobs if job.result) if not args.dry_run else 0)
    if not single and not args.json:
        verb = "would submit" if args.dry_run else "submitted"
        print(f"{verb} {len(good)} jobs" + ("" if args.dry_run else "; follow them with `yoloq queue`"))
    return 0


def analyse_job(job: Job, gpu: str | None) -> None:
    """The local analysis (dataset, model, estimates); a bad job keeps its error."""
    if job.error is not None:
        return
    from yoloq.analysis import analyse

    try:
        job.analysis = analyse(job.spec, gpu=gpu)  # bad input stops here: no run created, no GPU time
    except UserError as exc:
        job.error = exc


def submit_batch(jobs: list[Job], gpu: str | None, keep_going: bool, echo=lambda job: None,
                 reason: str = "yoloq submit", tags: tuple[str, ...] = ()) -> list[str]:
    """Check every job against the tier caps and the pool, then create their runs; one client.
    The core of `yoloq submit` and `POST /v1/jobs` (`reason` and extra run `tags` say which).

    A refused job gets its error; unless `keep_going`, any refusal stops the batch before any run
    is created. `echo(job)` is called as each run is created. Returns the batch's notes.
    """
    notes: list[str] = []
    with stack_client() as client:  # first: it points Prefect at the stack before Prefect is imported
        from blocks.policy import load_policy
        from work_pools.announce import announce_labels

        policy = load_policy()
        pool, source = _pool_gpus(client, gpu) if any(job.analysis is not None for job in jobs) else ([], "none")
        if not pool and any(job.analysis is not None for job in jobs):
            notes.append("fit not checked: the pool has no live node yet (give --gpu NAME to check against a type)")
        fits = {id(job): _checked_fit(job, policy, pool, source, notes) for job in jobs}
        stop_if_bad(jobs, keep_going, single=len(jobs) == 1)
        deployment_id = job_deployment_id(client)
        for job in jobs:
            if job.error is None:
                job_id = create_job_run(job.spec, reason=reason, client=client, deployment_id=deployment_id,
                                        tags=tags, labels=announce_labels(first_plan(job)))
                job.result = {"job_id": job_id, "fit": fits[id(job)], "notes": notes}
                echo(job)
    return notes


def first_plan(job: Job) -> dict[str, Any] | None:
    """The plan the job's first segment will carry (what the parent writes), from the analysis."""
    if job.analysis is None:
        return None
    from work_pools.segments import segment_plan

    return segment_plan(job.spec, job.analysis.to_dict(), 0, None)  # the leader reads the run's created


def _checked_fit(job: Job, policy, pool, source: str, notes: list[str]) -> dict[str, Any] | None:
    """The team's tier cap, then the fit against the pool; a refusal becomes the job's error."""
    try:
        check_tier_cap(job.spec, policy)
        return fit_on_pool(job.analysis, pool, source, policy, notes) if job.analysis is not None else None
    except UserError as exc:
        job.error = exc
        return None


def submit_job(spec, analysis=None, gpu: str | None = None) -> dict:
    """Create the parent run for a validated spec on the running stack (the Python API).

    With an analysis, the job must fit some GPU of the pool's live nodes (at its batch, or at
    the smallest reduced batch the policy allows); else it is refused (UserError).
    """
    job = Job("api", spec=spec, analysis=analysis)
    notes = submit_batch([job], gpu, keep_going=False)
    return {"job_id": job.result["job_id"], "fit": job.result["fit"], "notes": notes}


def check_tier_cap(spec, policy) -> None:
    """The team may not submit above its tier cap (as `policy_config.check_submit_allowed`, with
    the policy loaded once per batch)."""
    from work_pools.policy.rules import check_tier_allowed

    refusal = check_tier_allowed(spec.team, spec.tier, policy)
    if refusal:
        cap = policy.tier_caps.get(spec.team, policy.default_tier_cap)
        raise UserError("priority", refusal, f"use priority: {cap.label}")


def fit_on_pool(analysis, pool, source: str, policy, notes: list[str]) -> dict[str, Any] | None:
    """Check the analysed job against the pool's GPUs; raise when it fits nowhere."""
    from yoloq.analysis.fit import check_fit

    if not pool:
        return None
    smallest = max(1, policy.min_reduced_batch) if policy.allow_reduced_batch else analysis.batch
    verdict = check_fit(analysis, pool, smallest)
    if verdict.refusal is not None:
        raise verdict.refusal
    if verdict.reduced:
        notes.append(f"{analysis.name}: batch {analysis.batch} fits no GPU of the pool; it can run with a "
                     f"reduced batch of {verdict.batch} on {verdict.gpu.name} (node {verdict.gpu.node}), "
                     "which is not exact resume")
    return {"source": source, "node": verdict.gpu.node, "gpu": verdict.gpu.name, "batch": verdict.batch,
            "reduced": verdict.reduced}


def _pool_gpus(client, gpu: str | None):
    """(GPUs, where they come from): every live node's, else the --gpu type given, else none."""
    from yoloq.analysis.fit import PoolGpu

    live = [PoolGpu(node.name, info.name, info.mem_total_gb) for node in live_nodes(client) for info in node.gpus]
    if live:
        return live, "live nodes"
    if gpu:
        from yoloq.domain import gpus

        kind = gpus.lookup(gpu)  # already checked by the analysis
        return [PoolGpu("--gpu", kind.name, kind.mem_gb)], "--gpu"
    return [], "none"


def live_nodes(client) -> list:
    """The GPU pool's live node records, read through this sync client (as `work_pools.nodes.read_nodes`
    does through an async one: a new client per call costs more than the read)."""
    from work_pools.nodes import read_nodes_sync
    from yoloq.base.stores import GPU_POOL

    now = time.time()
    return [r for r in read_nodes_sync(client, GPU_POOL) if r.alive(now)]


def job_deployment_id(client):
    """The `yolo-job` deployment's id, read once per batch."""
    from yoloq.base.stores import JOB_DEPLOYMENT

    return client.read_deployment_by_name(JOB_DEPLOYMENT).id


def job_tags(job_id: str, spec, extra: tuple[str, ...] = ()) -> list[str]:
    return [f"job:{job_id}", f"team:{spec.team}", f"tier:{spec.priority}", "yoloq", *extra]


def create_job_run(spec, reason: str, client=None, deployment_id=None, tags: tuple[str, ...] = (),
                   job_id: str | None = None, labels: dict[str, str] | None = None) -> str:
    """Create the `yolo-job` run (the job) and its audit event; the caller has a Prefect API.

    With a sync `client` and the deployment's id (a batch), the run is created through that
    client; without, through `run_deployment` (a new client). The job id is the run's
    idempotency key: a creation retried after a lost response returns the same run. `labels`
    (the batch path only) are set at creation: an urgent job's announcement (`work_pools.announce`).
    """
    from yoloq.records.events import emit_job_event

    job_id = job_id or f"{spec.name}-{secrets.token_hex(3)}"
    parameters = {"spec": spec.model_dump(), "job_id": job_id}
    if client is not None and deployment_id is not None:
        from prefect.states import Scheduled

        client.create_flow_run_from_deployment(deployment_id, parameters=parameters, state=Scheduled(),
                                               name=job_id, tags=job_tags(job_id, spec, tags),
                                               idempotency_key=job_id, labels=labels or None)
    else:
        from prefect.deployments import run_deployment

        from yoloq.base.stores import JOB_DEPLOYMENT

        run_deployment(JOB_DEPLOYMENT, parameters=parameters, flow_run_name=job_id, timeout=0,
                       as_subflow=False, tags=job_tags(job_id, spec, tags), idempotency_key=job_id)
    emit_job_event("submitted", job_id, spec.team, tier=spec.priority, reason=reason)
    return job_id

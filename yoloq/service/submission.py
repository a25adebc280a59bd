"""Submit: admit every job of a batch (`yoloq.service.admission.admit`), then create the
`yolo-job` runs of the admitted ones, all through one Prefect client.

The core of `yoloq submit` (in this process) and of `POST /v1/jobs` (the server's process,
which `yoloq submit` reaches for one job on this host, or through `yoloq login`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from yoloq.base.errors import UserError
from yoloq.domain.contract import SegmentPlan, run_tags
from yoloq.service.admission import PoolContext, Verdict, admit, pool_context
from yoloq.service.connection import stack_client

_NAMED_IN_ERROR = 5  # bad jobs named, after the first, in the one error line


@dataclass
class Job:
    """One job of a batch, as it goes through admission and creation."""

    source: str
    spec: Any = None
    analysis: Any = None
    error: UserError | None = None
    point: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None  # job_id, fit, notes (once created)
    verdict: Verdict | None = None


def analyse_job(job: Job, gpu: str | None) -> None:
    """The analysis's verdict alone (no pool yet); a refused job keeps its error."""
    if job.error is not None:
        return
    verdict = admit(job.spec, gpu, None)
    job.verdict, job.analysis, job.error = verdict, verdict.analysis, verdict.refusal


def admit_on_pool(job: Job, gpu: str | None, pool: PoolContext) -> None:
    """The full verdict (tier cap and fit on `pool`) for a job whose analysis passed."""
    if job.error is not None:
        return
    verdict = admit(job.spec, gpu, pool, analysis=job.analysis)
    job.verdict, job.analysis, job.error = verdict, verdict.analysis, verdict.refusal


def stop_if_bad(jobs: list[Job], keep_going: bool, single: bool) -> None:
    bad = [job for job in jobs if job.error is not None]
    if bad and (not keep_going or len(bad) == len(jobs)):
        raise batch_error(bad, single, created=0)


def batch_error(bad: list[Job], single: bool, created: int) -> UserError:
    """One line: the first bad job in full, then the file and field of the others."""
    first = bad[0].error
    assert first is not None
    if single:
        return first
    others = ", ".join(f"{job.source} ({job.error.field})" for job in bad[1:1 + _NAMED_IN_ERROR]
                       if job.error is not None)
    more = len(bad) - 1 - _NAMED_IN_ERROR
    tail = f"; {len(bad) - 1} more bad: {others}" + (f" and {more} others" if more > 0 else "") if others else ""
    outcome = f"{created} other jobs created" if created else "nothing created"
    fix = f"{first.fix}; " if first.fix else ""
    return UserError(bad[0].source, f"{first.field}: {first.problem}{tail}",
                     f"{fix}{outcome}; fix the specs and submit again")


def submit_batch(jobs: list[Job], gpu: str | None, keep_going: bool,
                 echo: Callable[[Job], None] = lambda job: None, reason: str = "yoloq submit",
                 tags: tuple[str, ...] = ()) -> list[str]:
    """Admit every analysed job on the pool, then create their runs; one client. Returns the
    batch's notes (each once).

    A refused job gets its error; unless `keep_going`, any refusal stops the batch before any run
    is created. `echo(job)` is called as each run is created.
    """
    with stack_client() as client:  # first: it points Prefect at the stack before Prefect is imported
        from work_pools.announce import announce_labels

        pool = pool_context(client, gpu)
        for job in jobs:
            admit_on_pool(job, gpu, pool)
        notes = list(dict.fromkeys(n for job in jobs if job.verdict for n in job.verdict.notes))
        stop_if_bad(jobs, keep_going, single=len(jobs) == 1)
        deployment_id = job_deployment_id(client)
        for job in jobs:
            if job.error is None:
                job_id = create_job_run(job.spec, reason=reason, client=client, deployment_id=deployment_id,
                                        tags=tags, labels=announce_labels(first_plan(job)))
                job.result = {"job_id": job_id, "fit": job.verdict.fit if job.verdict else None, "notes": notes}
                echo(job)
    return notes


def submit_job(spec: Any, analysis: Any = None, gpu: str | None = None) -> dict[str, Any]:
    """Admit and create one job on the running stack (the Python API); a refusal raises UserError."""
    job = Job("api", spec=spec, analysis=analysis)
    if analysis is None:
        analyse_job(job, gpu)
        if job.error is not None:
            raise job.error
    notes = submit_batch([job], gpu, keep_going=False)
    assert job.result is not None
    return {"job_id": job.result["job_id"], "fit": job.result["fit"], "notes": notes}


def first_plan(job: Job) -> SegmentPlan | None:
    """The plan the job's first segment will carry (what the parent writes), from the analysis."""
    if job.analysis is None:
        return None
    from work_pools.segments import segment_plan

    return segment_plan(job.spec, job.analysis.to_dict(), 0, None)  # the leader reads the run's created


def job_deployment_id(client: Any) -> Any:
    """The `yolo-job` deployment's id, read once per batch."""
    from yoloq.base.names import JOB_DEPLOYMENT

    return client.read_deployment_by_name(JOB_DEPLOYMENT).id


def job_tags(job_id: str, spec: Any, extra: tuple[str, ...] = ()) -> list[str]:
    return run_tags(job_id, spec.team, spec.priority, *extra)


def create_job_run(spec: Any, reason: str, client: Any = None, deployment_id: Any = None,
                   tags: tuple[str, ...] = (), job_id: str | None = None,
                   labels: dict[str, str] | None = None) -> str:
    """Create the `yolo-job` run (the job) and its audit event; the caller has a Prefect API.

    With a sync `client` and the deployment's id (a batch), the run is created through that
    client; without, through `run_deployment` (a new client). The job id is the run's
    idempotency key: a creation retried after a lost response returns the same run. `labels`
    (the batch path only) are set at creation: an urgent job's announcement (`work_pools.announce`).
    """
    from yoloq.records.events import emit_job_event

    job_id = job_id or new_job_id(spec)
    parameters = job_parameters(spec, job_id)
    if client is not None and deployment_id is not None:
        from prefect.states import Scheduled

        client.create_flow_run_from_deployment(deployment_id, parameters=parameters, state=Scheduled(),
                                               name=job_id, tags=job_tags(job_id, spec, tags),
                                               idempotency_key=job_id, labels=labels or None)
    else:
        from prefect.deployments import run_deployment

        from yoloq.base.names import JOB_DEPLOYMENT

        run_deployment(JOB_DEPLOYMENT, parameters=parameters, flow_run_name=job_id, timeout=0,
                       as_subflow=False, tags=job_tags(job_id, spec, tags), idempotency_key=job_id)
    emit_job_event("submitted", job_id, spec.team, tier=spec.priority, reason=reason)
    return job_id


def new_job_id(spec: Any) -> str:
    """A job's id: its name and a random suffix (also its run's name and idempotency key)."""
    return f"{spec.name}-{secrets.token_hex(3)}"


def job_parameters(spec: Any, job_id: str) -> dict[str, Any]:
    """The `yolo-job` run's parameters."""
    return {"spec": spec.model_dump(), "job_id": job_id}


def job_run_request(spec: Any, job_id: str, tags: tuple[str, ...] = (),
                    labels: dict[str, str] | None = None) -> dict[str, Any]:
    """One run of Prefect's bulk creation route (`yoloq.service.bulk`): what `create_job_run`
    gives `create_flow_run_from_deployment`, as JSON (Scheduled, the server's default)."""
    request: dict[str, Any] = {"name": job_id, "parameters": _jsonable(job_parameters(spec, job_id)),
                               "enforce_parameter_schema": False,  # parse_spec checked it, more strictly (a third of the cost)
                               "tags": job_tags(job_id, spec, tags), "idempotency_key": job_id}
    if labels:
        request["labels"] = labels
    return request


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)

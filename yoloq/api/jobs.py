"""`/v1/jobs` and `/v1/analyse`: submit, analyse, list, show, cancel, retier and extend jobs, through the
service layer the CLI calls too (`yoloq.service`).

A request acts as its token's team: a spec or job of another team is refused (403), and so is
a tier above the team's cap, whatever the client checked. Every event names the caller.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header
from pydantic import BaseModel, Field

from yoloq.api.auth import Authed, require_team
from yoloq.api.errors import refuse, refuse_error
from yoloq.base.errors import UserError
from yoloq.domain.contract import EPOCH_LABEL, GPUS_LABEL, NODE_LABEL, PREEMPTED_BY_LABEL, start_epoch
from yoloq.records.teams import Caller
from yoloq.domain.tiers import TIER_NAMES

router = APIRouter(tags=["jobs"])
_LOG = logging.getLogger("yoloq.api.jobs")
_SUBMIT_LOCK = threading.Lock()  # an idempotency key is checked and used in one step
IDEMPOTENCY_TAG = "idem:"

SPEC_EXAMPLE = {"name": "cones", "team": "vision", "priority": "normal", "model": "yolov8n.yaml",
                "data": "/data/cones/data.yaml", "epochs": 10, "imgsz": 640, "batch": 16}


class TierChange(BaseModel):
    tier: str = Field(description=f"one of {', '.join(TIER_NAMES)}", examples=["high"])
    reason: str = Field(default="changed through the API", description="recorded in the audit log")


class EpochsChange(BaseModel):
    epochs: int = Field(description="the job's new total, more than now", examples=[150])
    reason: str = Field(default="extended through the API", description="recorded in the audit log")


@router.post("/jobs", status_code=201, summary="Submit a job (the YAML spec's fields, as JSON)")
def submit(spec: Annotated[dict[str, Any], Body(examples=[SPEC_EXAMPLE])],
           who: Authed,
           idempotency_key: str | None = Header(default=None, description="a repeat gets 409")) -> dict[str, Any]:
    """Admitted as `yoloq analyse` shows (`yoloq.service.admission.admit`), then created: a
    refusal is 403 (another team's spec, a tier above the team's cap) or 422 (anything else)."""
    from yoloq.domain.spec import parse_spec
    from yoloq.records.events import acting_as

    parsed = parse_spec(spec)  # a bad field: UserError -> 422 with the CLI's line
    require_team(who, parsed.team)
    tags = (_idempotency_tag(who, idempotency_key),) if idempotency_key else ()
    with acting_as(who.actor), _SUBMIT_LOCK:
        if tags:
            _refuse_repeat(tags[0], idempotency_key or "")
        job = _submit(parsed, tags, reason="yoloq submit" if who.local else "POST /v1/jobs")
    return {"job_id": job.result["job_id"], "analysis": job.analysis.to_dict(), **_placement(job),
            "fit": job.result["fit"], "notes": job.result["notes"]}


@router.post("/jobs/bulk", status_code=201,
             summary="Submit many jobs in one request, all or nothing (a list of specs)")
def submit_bulk(specs: Annotated[list[dict[str, Any]], Body(examples=[[SPEC_EXAMPLE, SPEC_EXAMPLE]])],
                who: Authed,
                idempotency_key: str | None = Header(default=None, description="a repeat gets 409")
                ) -> dict[str, Any]:
    """Each spec admitted as `POST /v1/jobs` admits it; the first refused one refuses the
    batch, naming its index (`jobs[3].epochs: ...`), and nothing is created: 403 for another
    team's spec or a tier above the team's cap, 422 for anything else. At most 1,000 specs.
    Answers the created job ids in the specs' order (`yoloq.service.bulk`)."""
    from yoloq.records.events import acting_as
    from yoloq.service.bulk import BulkRefused, check_size, refusal_status
    from yoloq.service.bulk import submit_bulk as submit_all

    check_size(len(specs))
    parsed = [_parse_at(i, spec) for i, spec in enumerate(specs)]
    for index, spec in enumerate(parsed):
        if not who.admin and spec.team != who.team:
            raise refuse(403, f"jobs[{index}].team", f"this token belongs to team {who.team!r}, "
                         f"not {spec.team!r}", f"use {spec.team!r}'s own token; nothing was created")
    tags = (_idempotency_tag(who, idempotency_key),) if idempotency_key else ()
    reason = "yoloq submit" if who.local else "POST /v1/jobs/bulk"
    with acting_as(who.actor), _SUBMIT_LOCK:
        if tags:
            _refuse_repeat(tags[0], idempotency_key or "")
        try:
            result = submit_all(parsed, reason=reason, tags=tags)
        except BulkRefused as exc:
            raise refuse_error(refusal_status(exc), exc) from None
    return result.to_dict()


def _parse_at(index: int, spec: dict[str, Any]):
    """The spec at `index` of a batch, parsed; a bad field names the index (422)."""
    from yoloq.domain.spec import parse_spec
    from yoloq.service.bulk import BulkRefused

    try:
        return parse_spec(spec)
    except UserError as exc:
        raise refuse_error(422, BulkRefused(index, exc, "spec")) from None


@router.post("/analyse", summary="The admission verdict on a job spec, creating nothing (`yoloq analyse`)")
def analyse(spec: Annotated[dict[str, Any], Body(examples=[SPEC_EXAMPLE])], who: Authed) -> dict[str, Any]:
    """The verdict `POST /v1/jobs` would give (same refusals, same status codes), and the analysis."""
    from yoloq.domain.spec import parse_spec
    from yoloq.service.admission import admit, pool_context
    from yoloq.service.connection import stack_client

    parsed = parse_spec(spec)
    require_team(who, parsed.team)
    with stack_client() as client:
        verdict = admit(parsed, None, pool_context(client, None))
    _raise_refusal(verdict)
    return {"analysis": verdict.analysis.to_dict(), **verdict.to_dict()}


@router.get("/jobs", summary="All jobs (optionally one team's), newest first")
def list_all(who: Authed, team: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    from yoloq.service.connection import stack_client
    from yoloq.service.jobs import job_views

    with stack_client() as client:
        views = job_views(client, team=team, limit=min(max(limit, 1), 200))
    return [v.to_dict() for v in views]


@router.get("/jobs/{job_id}", summary="One job: state, tier, epochs, weights, segments, history, MLflow run")
def show(job_id: str, who: Authed) -> dict[str, Any]:
    from yoloq.service import jobs
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        record = _find(client, job_id)
        view = jobs.job_view(client, job_id, record)
        history = jobs.history(client, job_id)
    return {**view.to_dict(), "segment_runs": [_segment(s) for s in record.segments],
            "history": history, "mlflow": mlflow_link(job_id)}


@router.delete("/jobs/{job_id}", summary="Cancel a job (its live segments and its parent run)")
def cancel(job_id: str, who: Authed, reason: str = "cancelled through the API") -> dict[str, Any]:
    from yoloq.service import jobs

    return _change(job_id, who, lambda client, record: jobs.cancel(client, record, reason))


@router.post("/jobs/{job_id}/tier", summary="Move a queued or running job to another tier")
def retier(job_id: str, change: TierChange, who: Authed) -> dict[str, Any]:
    from yoloq.service import jobs

    if change.tier not in TIER_NAMES:
        raise UserError("tier", f"unknown tier {change.tier!r}", f"use one of: {', '.join(TIER_NAMES)}")
    return _change(job_id, who, lambda client, record: jobs.retier(client, record, change.tier, change.reason))


@router.post("/jobs/{job_id}/epochs", summary="Extend a job: raise its total epochs (it trains on)")
def extend(job_id: str, change: EpochsChange, who: Authed) -> dict[str, Any]:
    from yoloq.service import jobs

    return _change(job_id, who, lambda client, record: jobs.extend(client, record, change.epochs, change.reason))


def _change(job_id: str, who: Caller, act: Any) -> dict[str, Any]:
    """Run `act(client, record)` on the caller's own team's job, as the caller: 409 for a job
    that has ended, 403 for a tier above the team's cap."""
    from yoloq.records.events import acting_as
    from yoloq.service import jobs
    from yoloq.service.admission import TierCapError
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        record = _find(client, job_id)
        require_team(who, record.team)
        try:
            with acting_as(who.actor):
                return act(client, record).to_dict()
        except jobs.JobEndedError as exc:
            raise refuse_error(409, exc) from None
        except TierCapError as exc:
            raise refuse_error(403, exc) from None


def _submit(spec, tags: tuple[str, ...], reason: str):
    """The CLI's own path: admit (analysis, tier cap, fit), create the run. The host's own CLI
    (the local operator) records its submits as `yoloq submit`, as it does without the API."""
    from yoloq.service.submission import Job, analyse_job, submit_batch

    job = Job("api", spec=spec)
    analyse_job(job, None)
    if job.error is None:
        try:
            submit_batch([job], None, keep_going=False, reason=reason, tags=tags)
        except UserError:
            if job.error is None:  # not the job's own refusal (e.g. the stack is down)
                raise
    if job.verdict is not None:
        _raise_refusal(job.verdict)
    if job.error is not None:
        raise job.error
    return job


def _raise_refusal(verdict) -> None:
    """A refused verdict as the API answers it: 403 for the tier cap, else 422 (the CLI's line)."""
    from yoloq.service.admission import TIER_CAP

    if verdict.refusal is None:
        return
    if verdict.refused_by == TIER_CAP:
        raise refuse_error(403, verdict.refusal)
    raise verdict.refusal


def _idempotency_tag(who: Caller, key: str) -> str:
    digest = hashlib.sha256(f"{who.team}\0{key}".encode()).hexdigest()[:24]
    return f"{IDEMPOTENCY_TAG}{digest}"


def _refuse_repeat(tag: str, key: str) -> None:
    """409 when a job was already created with this team's idempotency key."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    from yoloq.service.connection import stack_client

    with stack_client() as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])), limit=1)
    if runs:
        raise refuse(409, "Idempotency-Key", f"{key!r} was already used for job {runs[0].name}",
                     f"follow that job (GET /v1/jobs/{runs[0].name}), or send a new key")


def _placement(job) -> dict[str, Any]:
    """Where the new job enters the queue and when it should start: the board's forward run
    over the pool as it stands (`yoloq.api.eta`), provisional until the board plans the job."""
    from yoloq.api.eta import provisional_eta
    from yoloq.service.connection import stack_client
    from yoloq.views.queueview import queue_rows

    with stack_client() as client:
        rows = queue_rows(client)
    placed = entry_position(rows, job.spec.tier.label)
    try:
        estimate = provisional_eta(job.spec, job.analysis.to_dict(), job.result["job_id"])
    except Exception as exc:  # noqa: BLE001 -- the job exists: answer 201, say why there is no ETA
        _LOG.error("provisional ETA for %s failed: %s: %s", job.result["job_id"], exc.__class__.__name__, exc)
        return {**placed, "eta_note": f"no estimate: {exc.__class__.__name__}: {str(exc)[:200]}"}
    if estimate is not None:
        placed.update(estimate, eta_note=estimate["eta"]["note"])
    return placed


def entry_position(rows: list[dict[str, Any]], tier: str) -> dict[str, Any]:
    """Position (1 = next) of a job entering a queue of `rows` at `tier`; no ETA (the answer
    when the pool has no live GPU the job fits)."""
    order = {name: i for i, name in enumerate(TIER_NAMES)}
    ahead = [r for r in rows if r["state"] == "waiting" and order.get(r["tier"], 9) <= order[tier]]
    return {"position": len(ahead) + 1, "eta": None,
            "eta_note": "no estimate: no live node has a GPU the job fits yet; GET /v1/queue "
                        "gives the board's ETA once the scheduler has planned the job"}


def _find(client, job_id: str):
    from yoloq.service.jobs import find

    try:
        return find(client, job_id)
    except UserError as exc:
        raise refuse_error(404, exc) from None


def _segment(run) -> dict[str, Any]:
    params = run.parameters or {}
    labels = run.labels or {}
    return {"name": run.name, "id": str(run.id), "state": run.state.name if run.state else None,
            "from_epoch": start_epoch(run),
            "to_epoch": params.get("stop_after_epoch"), "epoch": labels.get(EPOCH_LABEL),
            "node": labels.get(NODE_LABEL), "gpus": labels.get(GPUS_LABEL),
            "start": run.start_time.isoformat() if run.start_time else None,
            "end": run.end_time.isoformat() if run.end_time else None,
            "preempted_by": labels.get(PREEMPTED_BY_LABEL)}


def mlflow_link(job_id: str) -> dict[str, Any]:
    """The job's MLflow run: tracking URI, run id and, for a tracking server, a browser link."""
    from blocks import stores
    from yoloq.records.tracking import JobTracker

    try:
        uri, experiment = stores.mlflow_tracking_uri()
        tracker = JobTracker(uri, experiment)
        run_id = tracker.find_run(job_id)
    except Exception as exc:  # noqa: BLE001 -- shown, not hidden: the rest of the job is still useful
        return {"error": f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    link = None
    if run_id and uri.startswith(("http://", "https://")):
        link = f"{uri.rstrip('/')}/#/experiments/{tracker._experiment()}/runs/{run_id}"
    return {"tracking_uri": uri, "experiment": experiment, "run_id": run_id, "url": link}

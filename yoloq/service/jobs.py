"""A job as every view shows it, its history, and the changes a user makes to it.

`job_view` is the one answer for a job's current tier (after `yoloq retier`), state, progress,
preemption count and weights location: `yoloq status`, `GET /v1/jobs/{id}` and the web page
read it. `history` is the job's timeline plus one row per change (tier changed, epochs
extended, cancel requested) naming who made it. `retier`, `extend` and `cancel` check, act and
record the change.
Every function takes a sync Prefect client pointed at the stack (`connection.stack_client`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote, urlparse

from yoloq.base.errors import UserError
from yoloq.domain.contract import job_event
from yoloq.domain.tiers import TIER_NAMES

CHANGE_EVENTS = {job_event("tier_changed"): "tier changed", job_event("cancelled"): "cancel requested",
                 job_event("extended"): "epochs extended"}


class JobEndedError(UserError):
    """The job has ended: nothing about it can change (the API answers 409)."""


@dataclass(frozen=True)
class WeightsLocation:
    """Where a job's weights are: its newest checkpoint in the store. A finished job's last
    checkpoint holds the final weights and best.pt (`finished` true); the job's MLflow run also
    keeps best.pt under `training/`."""

    uri: str  # the checkpoint object: file:///... or s3://bucket/prefix/...
    path: str | None  # the same as a local file path, when the store is a folder
    epoch: int
    finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "path": self.path, "epoch": self.epoch, "finished": self.finished}


@dataclass(frozen=True)
class JobView:
    """One job as `status`, REST and the web page show it."""

    job_id: str
    team: str
    tier: str  # the current tier (after `yoloq retier`)
    submitted_tier: str
    state: str
    epochs: int
    epochs_done: int
    segments: int
    preemptions: int  # `yoloq.records.jobs.JobRecord.preemptions` (the one count)
    flow_run_id: str | None
    weights: WeightsLocation | None = None  # read for one job's view only (a store read)

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "team": self.team, "tier": self.tier,
                "submitted_tier": self.submitted_tier, "state": self.state, "epochs": self.epochs,
                "epochs_done": self.epochs_done, "segments": self.segments, "preemptions": self.preemptions,
                "flow_run_id": self.flow_run_id, "weights": self.weights.to_dict() if self.weights else None}


@dataclass(frozen=True)
class TierChange:
    job_id: str
    old_tier: str
    new_tier: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "old_tier": self.old_tier, "new_tier": self.new_tier, "reason": self.reason}


@dataclass(frozen=True)
class Extension:
    job_id: str
    old_epochs: int
    new_epochs: int
    epochs_done: int
    restarted: bool  # the job had completed: its parent run was queued again
    est_duration_s: float | None  # the re-analysed estimate of the whole job at the new total
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "old_epochs": self.old_epochs, "new_epochs": self.new_epochs,
                "epochs_done": self.epochs_done, "restarted": self.restarted,
                "est_duration_s": self.est_duration_s, "reason": self.reason}


@dataclass(frozen=True)
class Cancellation:
    job_id: str
    cancelling_runs: tuple[str, ...]  # flow run ids set Cancelling (none: the job had ended)
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "cancelling_runs": list(self.cancelling_runs), "reason": self.reason}


def find(client: Any, job_id: str) -> Any:
    """The job's record (`yoloq.records.jobs.JobRecord`), or a one-line error."""
    from yoloq.records.jobs import find_job

    return find_job(client, job_id)


def view_of(record: Any, weights: WeightsLocation | None = None) -> JobView:
    return JobView(job_id=record.job_id, team=record.team, tier=record.tier,
                   submitted_tier=record.submitted_tier or record.tier, state=record.state,
                   epochs=record.epochs, epochs_done=record.epochs_done, segments=len(record.segments),
                   preemptions=record.preemptions,
                   flow_run_id=str(record.flow_run.id) if record.flow_run else None, weights=weights)


def job_view(client: Any, job_id: str, record: Any = None) -> JobView:
    """The job as every view shows it, with where its weights are."""
    record = record or find(client, job_id)
    return view_of(record, weights_location(record.job_id))


def job_views(client: Any, job_id: str | None = None, team: str | None = None,
              limit: int = 100) -> list[JobView]:
    """Jobs newest first (one, or one team's); weights only for a single job asked by id."""
    from yoloq.records.jobs import list_jobs

    records = [r for r in list_jobs(client, job_id, limit=limit) if team is None or r.team == team]
    if job_id:
        return [view_of(r, weights_location(r.job_id)) for r in records]
    return [view_of(r) for r in records]


def weights_location(job_id: str, store: Any = None) -> WeightsLocation | None:
    """The job's newest checkpoint in the store (None before its first epoch ends)."""
    from blocks import stores

    store = store or stores.checkpoint_store()
    info = store.latest(job_id)
    if info is None:
        return None
    uri = f"{store.location().rstrip('/')}/{info.key}"
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme == "file" else None
    return WeightsLocation(uri=uri, path=path, epoch=info.epoch, finished=info.finished)


def history(client: Any, job_id: str) -> list[dict[str, Any]]:
    """The job's timeline (`yoloq.views.timeline`) with a row per change and its actor; empty
    for an unknown job."""
    from yoloq.views.timeline import job_timeline

    rows = job_timeline(client, job_id)
    if not rows:
        return []
    rows += change_rows(client, job_id)
    return sorted(rows, key=lambda r: str(r["time"]))


def change_rows(client: Any, job_id: str) -> list[dict[str, Any]]:
    """`tier changed` / `cancel requested` rows from the job's audit events, each with its actor."""
    from yoloq.views.auditlog import read_audit

    since = datetime.now(timezone.utc) - timedelta(days=365)
    rows = []
    for event in read_audit(client, since=since, job_id=job_id):
        what = CHANGE_EVENTS.get(event["event"])
        if what is None:
            continue
        details = event.get("details") or {}
        change = f"{details.get('old_tier')} -> {details.get('new_tier')}, " if "new_tier" in details else ""
        if "new_epochs" in details:
            change = f"{details.get('old_epochs')} -> {details.get('new_epochs')} epochs, "
        rows.append({"time": event["occurred"], "what": what,
                     "detail": f"{change}by {event['actor']}: {event['reason']}".strip().rstrip(":"),
                     "actor": event["actor"]})
    return rows


def check_open(record: Any) -> None:
    """A job that has ended keeps its tier and cannot be cancelled again."""
    if record.flow_run.state and record.flow_run.state.is_final():
        raise JobEndedError("job", f"{record.job_id} has ended ({record.state})", "retier a queued or running job")


def retier(client: Any, record: Any, tier: str, reason: str, policy: Any = None) -> TierChange:
    """Move a queued or running job to `tier`: checked (open, the team's cap under the policy in
    force), then the parent and its live segments labelled, and the change recorded."""
    from yoloq.service.admission import check_tier_cap

    if tier not in TIER_NAMES:
        raise UserError("tier", f"unknown tier {tier!r}", f"use one of: {', '.join(TIER_NAMES)}")
    check_open(record)
    if policy is None:
        from blocks.policy import load_policy

        policy = load_policy()
    check_tier_cap(_spec_of(record).model_copy(update={"priority": tier}), policy)
    apply_tier(client, record, tier, reason)
    return TierChange(record.job_id, record.tier, tier, reason)


def apply_tier(client: Any, record: Any, tier: str, reason: str) -> None:
    """Label the parent and its live segments with the new tier and record the event."""
    from work_pools.segments import TIER_LABEL
    from yoloq.records.events import emit_job_event

    runs = [record.flow_run, *(s for s in record.segments if s.state and not s.state.is_final())]
    for run_ in runs:
        client.update_flow_run_labels(run_.id, {TIER_LABEL: tier})
    emit_job_event("tier_changed", record.job_id, record.team, reason=reason, old_tier=record.tier, new_tier=tier)


def extend(client: Any, record: Any, epochs: int, reason: str, pool: Any = None) -> Extension:
    """Raise a job's total to `epochs` (`yoloq extend`): queued, running, preempted or
    completed. Checked (more than now; not ended otherwise; not early-stopped; an engine that
    can extend; the extended spec re-admitted against the pool), then the new total is set on
    the parent run, which trains on from its newest checkpoint; a completed job's parent is
    queued again. The LR schedule from there on is the new total's (docs/concepts/extend.md)."""
    from prefect.states import Scheduled

    from yoloq.analysis.models import engine_of_model
    from yoloq.domain.contract import EPOCHS_LABEL
    from yoloq.records.events import emit_job_event
    from yoloq.service.admission import admit, pool_context

    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise UserError("epochs", f"{epochs!r} is not a whole number of epochs", "give the new total, e.g. --epochs 150")
    if epochs <= record.epochs:
        raise UserError("epochs", f"{epochs} is not more than the job's {record.epochs} epochs",
                        f"give the new total, larger than {record.epochs}")
    state = record.flow_run.state
    completed = bool(state and state.is_completed())
    if state and state.is_final() and not completed:
        raise JobEndedError("job", f"{record.job_id} has ended ({record.state}): only a queued, running "
                            "or completed job can be extended", "submit it again, or fine-tune from it")
    spec = _spec_of(record).model_copy(update={"epochs": epochs, "priority": record.tier})
    verdict = admit(spec, None, pool if pool is not None else pool_context(client, None))
    if not verdict.accepted:
        raise verdict.refusal
    if engine_of_model(verdict.analysis.weights or spec.model) == "yolov5":
        raise UserError("model", f"{record.job_id} trains on the yolov5 engine, which cannot extend a job yet",
                        "submit a new job that fine-tunes from its weights")
    latest = _latest_checkpoint(record.job_id)
    if latest is not None and latest.finished:
        _check_extendable(record.job_id, latest)
    client.update_flow_run_labels(record.flow_run.id, {EPOCHS_LABEL: str(epochs)})
    if completed:
        client.set_flow_run_state(record.flow_run.id, Scheduled(
            message=f"extended to {epochs} epochs: training on from epoch {record.epochs_done}"), force=True)
    emit_job_event("extended", record.job_id, record.team, reason=reason,
                   old_epochs=record.epochs, new_epochs=epochs)
    estimate = getattr(verdict.analysis, "est_duration_s", None)
    return Extension(record.job_id, record.epochs, epochs, latest.epoch if latest else 0, completed,
                     float(estimate) if estimate is not None else None, reason)


def _latest_checkpoint(job_id: str) -> Any:
    from blocks import stores

    return stores.checkpoint_store().latest(job_id)


def _check_extendable(job_id: str, latest: Any) -> None:
    """A finished checkpoint trains on only when it reached its total (an early-stopped job
    would stop again at once) and was written by a release that records that total."""
    if not latest.target_epochs:
        raise UserError("job", f"{job_id} finished before this release recorded a job's total in "
                        "its checkpoints, so it cannot be extended exactly",
                        "fine-tune from it: a new job with model: <its best.pt>")
    if latest.epoch < latest.target_epochs:
        raise UserError("job", f"{job_id} stopped early at epoch {latest.epoch} of {latest.target_epochs} "
                        "(no improvement for its patience): extended, it would stop again at once",
                        "fine-tune from it, or submit again with a larger patience")


def cancel(client: Any, record: Any, reason: str) -> Cancellation:
    """Set the job's live runs (the parent, then its segments) Cancelling and record the event
    (none when no run was live: nothing was cancelled).

    The parent goes first: a segment cancelled first ends within milliseconds, its parent then
    ends Cancelled, and a forced Cancelling written after that left the parent Cancelling for
    good (seen in CI: `test_submit_bulk`'s sweep waited 240 s for a parent the runner had ended)."""
    from prefect.states import Cancelling

    from yoloq.records.events import emit_job_event

    targets = [record.flow_run] if record.flow_run.state and not record.flow_run.state.is_final() else []
    targets += [s for s in record.segments if s.state and not s.state.is_final()]
    for run_ in targets:
        client.set_flow_run_state(run_.id, Cancelling(message=reason), force=True)
    if targets:  # an ended job: nothing cancelled, nothing recorded
        emit_job_event("cancelled", record.job_id, record.team, reason=reason)
    return Cancellation(record.job_id, tuple(str(r.id) for r in targets), reason)


def _spec_of(record: Any) -> Any:
    from yoloq.domain.spec import parse_spec

    return parse_spec((record.flow_run.parameters or {}).get("spec") or {})

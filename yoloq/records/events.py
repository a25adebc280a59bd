"""yoloq's audit log: Prefect events, one resource per job.

Event names: yoloq.job.submitted, .cancelled, .preempted, .resumed, .tier_changed,
yoloq.team.quota_exceeded, yoloq.team.quota_changed. Each carries the actor, the
job and a reason in its payload, and is visible in the Prefect UI's event feed.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from yoloq.domain.contract import RESOURCE_TEAM, job_event, job_resource_id

_ACTING_AS: ContextVar[str | None] = ContextVar("yoloq_actor", default=None)


def actor() -> str:
    """Who acts: the authenticated API caller (`team/label`) inside `acting_as`, else the OS user."""
    named = _ACTING_AS.get()
    if named:
        return named
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


@contextmanager
def acting_as(name: str) -> Iterator[None]:
    """Every event emitted inside names `name` as its actor (an API request's team and token)."""
    token = _ACTING_AS.set(name)
    try:
        yield
    finally:
        _ACTING_AS.reset(token)


def job_resource(job_id: str, team: str | None = None) -> dict[str, str]:
    resource = {"prefect.resource.id": job_resource_id(job_id), "prefect.resource.name": job_id}
    if team:
        resource[RESOURCE_TEAM] = team
    return resource


def emit_job_event(kind: str, job_id: str, team: str | None = None, **payload: Any) -> None:
    from prefect.events import emit_event

    emit_event(event=job_event(kind), resource=job_resource(job_id, team),
               payload={"actor": payload.pop("actor", None) or actor(), "job": job_id, **payload})


def emit_preemption(victim: Any, by_job: str, reason: str) -> None:
    """Victim is a SegmentView (or None when the worker lost track of it)."""
    if victim is None:
        return
    import time

    emit_job_event("preempted", victim.job_id, victim.team, actor="yolo-gpu-worker",
                   preemptor=by_job, epoch=victim.progress_epoch, reason=reason,
                   tier=victim.tier.label, wait_s=round(time.time() - victim.queued_at, 1))

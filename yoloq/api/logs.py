"""`GET /v1/jobs/{id}/logs` and `GET /v1/audit`: what happened to a team's jobs, for that team
(or an admin). The log is the job's parent and segment runs' Prefect logs in time order;
`yoloq logs JOB --follow` asks again with `after` a little before the last line's time and
skips the lines it has seen."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from yoloq.api.auth import Authed, require_team
from yoloq.api.errors import refuse

router = APIRouter(tags=["jobs"])


@router.get("/jobs/{job_id}/logs", summary="A job's training log (parent and segment runs' logs)")
def job_logs(job_id: str, who: Authed,
             after: Annotated[datetime | None, Query(description="only lines at or after this ISO time "
                                                                 "(for --follow)")] = None) -> dict[str, Any]:
    """{"job_id", "team", "finished", "ended", "lines": [{"id", "time", "run", "level", "message"}]}
    ("ended": the job's ISO end time, or null)."""
    from yoloq.service.connection import stack_client
    from yoloq.views.joblogs import job_log

    with stack_client() as client:
        page = job_log(client, job_id, after)
    if page is None:
        raise refuse(404, "job", f"no job named {job_id!r}", "list jobs with GET /v1/jobs")
    require_team(who, page["team"])
    return page


@router.get("/audit", summary="Audit events (submitted, preempted, cancelled, ...) of the caller's team")
def audit(who: Authed, since: Annotated[str, Query(description="ISO time or a span: 30m, 12h, 7d")] = "7d",
          team: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
    """A team token sees its own team's events; an admin token sees every team's (or `team`'s)."""
    from yoloq.views.auditlog import read_audit
    from yoloq.service.connection import stack_client
    from yoloq.service.usage import parse_audit_since as parse_since

    if team is not None:
        require_team(who, team)
    with stack_client() as client:
        return read_audit(client, since=parse_since(since), job_id=job,
                          team=team if who.admin else who.team)

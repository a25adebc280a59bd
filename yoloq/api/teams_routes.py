"""`/v1/teams`: admin-only team management (add, list, rotate, remove, limits, quota).

Tokens are shown once, in the response that makes them. Weights, caps and quotas go into the
scheduling policy block, which the scheduler enforces whatever a client does.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from yoloq.api.auth import Admin, team_store
from yoloq.records.teams import Caller

router = APIRouter(tags=["teams (admin)"])


class NewTeam(BaseModel):
    name: str = Field(examples=["vision"])
    weight: float | None = Field(default=None, gt=0, description="fair-share weight (default 1)")
    cap: str | None = Field(default=None, description="most urgent tier the team may use", examples=["high"])
    owner: str = Field(default="", description="owner's mail address (quota mails)")
    admin: bool = Field(default=False, description="an admin token (manages teams, quotas, tiers)")
    label: str = Field(default="default", description="the token's label, shown in the audit log")


class Limits(BaseModel):
    weight: float | None = Field(default=None, gt=0)
    cap: str | None = None


class QuotaChange(BaseModel):
    tu: float | None = Field(default=None, gt=0, description="Training Units per period; null clears it")
    period: Literal["day", "week"] = "day"
    reason: str = "changed through the API"


@router.get("/teams", summary="Teams with their owner, token id and limits (no secrets)")
def list_teams(who: Admin) -> list[dict[str, Any]]:
    from yoloq.service.teams import list_teams as listing

    return listing(team_store()).rows


@router.post("/teams", status_code=201, summary="Add a team; the response holds its token, once")
def add_team(new: NewTeam, who: Admin) -> dict[str, Any]:
    from yoloq.service.teams import add_team as add

    token = add(team_store(), new.name, new.weight, new.cap, new.owner, new.admin, new.label, who.actor)
    _audit("added", new.name, who, admin=new.admin, owner=new.owner, label=new.label)
    return {"team": new.name, "token": token}


@router.post("/teams/{name}/rotate", summary="A new token for the team; the old one stops working")
def rotate(name: str, who: Admin) -> dict[str, Any]:
    token = team_store().rotate(name)
    _audit("token_rotated", name, who)
    return {"team": name, "token": token}


@router.delete("/teams/{name}", summary="Remove a team and its token (its jobs stay)")
def remove(name: str, who: Admin) -> dict[str, Any]:
    from yoloq.service.teams import remove_team

    remove_team(team_store(), name, who.actor)
    _audit("removed", name, who)
    return {"team": name, "removed": True}


@router.post("/teams/{name}/limits", summary="Set a team's weight and tier cap")
def limits(name: str, change: Limits, who: Admin) -> dict[str, Any]:
    from yoloq.service.teams import change_limits

    team_store().get(name)
    change_limits(name, change.weight, change.cap, who.actor)
    return {"team": name, "weight": change.weight, "cap": change.cap}


@router.put("/teams/{name}/quota", summary="Set or clear (tu: null) a team's TU quota")
def quota(name: str, change: QuotaChange, who: Admin) -> dict[str, Any]:
    from yoloq.service.teams import change_quota

    old = change_quota(name, change.tu, change.period, change.reason, who.actor)
    return {"team": name, "old": old, "new": None if change.tu is None else {"tu": change.tu, "period": change.period}}


def _audit(kind: str, team: str, who: Caller, **payload: Any) -> None:
    """`yoloq.team.added|token_rotated|removed`, with the admin as actor."""
    from yoloq.service.teams import record_team_event

    record_team_event(kind, team, who.actor, "through the API", **payload)

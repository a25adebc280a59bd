"""`/v1/queue`, `/v1/usage`, `/v1/policy` and `/v1/me`: what every team may read."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from fastapi import APIRouter

from yoloq.api.auth import Authed

router = APIRouter(tags=["queue"])


@router.get("/me", summary="The caller: team, token label, admin or not")
def me(who: Authed) -> dict[str, Any]:
    return {"team": who.team, "label": who.label, "admin": who.admin}


@router.get("/queue", summary="Running and waiting segments: position, ETA with its interval, reason")
def queue(who: Authed) -> list[dict[str, Any]]:
    from yoloq.service.connection import stack_client
    from yoloq.views.queueview import queue_rows

    with stack_client() as client:
        return queue_rows(client)


@router.get("/usage", summary="Training Units per team and job over a window (e.g. since=24h)")
def usage(who: Authed, since: str = "7d", team: str | None = None) -> dict[str, Any]:
    from yoloq.service.connection import stack_client
    from yoloq.service.usage import parse_since, usage_rows

    window = parse_since(since)
    with stack_client():
        rows = usage_rows(window, team)
    totals: dict[str, float] = {}
    for row in rows:
        totals[row["team"]] = round(totals.get(row["team"], 0.0) + row["tu"], 6)
    return {"since": since, "rows": rows, "totals": totals}


@router.get("/policy", summary="The scheduling rules in force (tiers, weights, quotas, caps, grace)")
def policy(who: Authed) -> dict[str, Any]:
    from blocks.policy import resolve_policy_settings
    from yoloq.service.connection import stack_client

    with stack_client():
        settings = resolve_policy_settings()
    return policy_document(settings)


def policy_document(settings) -> dict[str, Any]:
    """The resolved policy as JSON: every field of `Policy`, tiers by name, plus the grace knobs
    and where the policy came from (block, environment or defaults)."""
    from yoloq.domain.tiers import TIER_NAMES

    return {"source": settings.source, "sources": dict(settings.sources), "tiers": list(TIER_NAMES),
            "min_grace_s": settings.min_grace_s, "grace_epochs": settings.grace_epochs,
            **_plain(dataclasses.asdict(settings.policy))}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.name.lower()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value

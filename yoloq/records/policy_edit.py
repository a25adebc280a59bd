"""Changes to the saved scheduling policy (`yoloq-policy` block) for one team: weight, tier cap
and Training Unit quota. Shared by `yoloq quota`, `yoloq team` and the API's admin routes; the
scheduler re-reads the block within 30 s, so what is saved here is what it enforces.

The caller has pointed Prefect at the stack. Each change is read-modify-write of one block,
serialised within this process; every change is an audit event with the acting caller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from yoloq.base.errors import UserError
from yoloq.domain.tiers import Tier

_LOCK = threading.Lock()


def edit_policy(change: Callable[[Any], None]) -> None:
    """Apply `change(block)` to the saved block (first change: what the worker uses now) and save it."""
    from blocks.policy import (
        POLICY_BLOCK,
        SchedulingPolicy,
        saved_block,
        settings_from_env,
    )

    with _LOCK:
        block = saved_block() or SchedulingPolicy.from_settings(settings_from_env())
        change(block)
        block.save(POLICY_BLOCK, overwrite=True)


def set_quota(team: str, tu: float | None, period: str = "day", reason: str = "changed by user") -> dict | None:
    """Set (or with `tu=None` clear) a team's TU budget; returns the old quota (or None)."""
    from blocks.policy import TeamQuota

    if tu is not None and tu <= 0:
        raise UserError("tu", f"{tu} is not a positive budget", "give a budget above 0, e.g. 2.5 TU")
    old: list[Any] = []

    def change(block) -> None:
        quotas = dict(block.quotas)
        old.append(quotas.pop(team, None))
        if tu is not None:
            quotas[team] = TeamQuota(tu=tu, period=period)
        block.quotas = quotas

    edit_policy(change)
    before = old[0].model_dump() if old[0] else None
    emit_team_event("quota_changed", team, reason, old=before,
                     new=None if tu is None else {"tu": tu, "period": period})
    return before


def set_limits(team: str, weight: float | None = None, cap: str | None = None) -> None:
    """A team's fair-share weight and most urgent tier (None leaves one as it is)."""
    if weight is not None and weight <= 0:
        raise UserError("weight", f"{weight} is not a positive weight", "give a weight above 0, e.g. 2")
    label = Tier.parse(cap).label if cap is not None else None

    def change(block) -> None:
        if weight is not None:
            block.team_weights = {**block.team_weights, team: float(weight)}
        if label is not None:
            block.tier_caps = {**block.tier_caps, team: label}

    if weight is not None or label is not None:
        edit_policy(change)
        emit_team_event("limits_changed", team, "changed by admin", weight=weight, cap=label)


def forget_team(team: str) -> None:
    """Drop a removed team's weight, cap and quota."""
    def change(block) -> None:
        block.team_weights = {t: w for t, w in block.team_weights.items() if t != team}
        block.tier_caps = {t: c for t, c in block.tier_caps.items() if t != team}
        block.quotas = {t: q for t, q in block.quotas.items() if t != team}

    edit_policy(change)


def team_limits(policy, team: str) -> dict[str, Any]:
    """What the policy gives a team now: weight, tier cap and quota."""
    quota = policy.quotas.get(team)
    return {"weight": policy.weight(team),
            "cap": policy.tier_caps.get(team, policy.default_tier_cap).label,
            "quota": {"tu": quota.tu, "period": quota.period} if quota else None}


def emit_team_event(kind: str, team: str, reason: str, **payload: Any) -> None:
    """A `yoloq.team.<kind>` audit event naming the acting caller."""
    from prefect.events import emit_event

    from yoloq.records.events import actor

    from yoloq.domain.contract import RESOURCE_TEAM, team_event, team_resource_id

    emit_event(event=team_event(kind),
               resource={"prefect.resource.id": team_resource_id(team), "prefect.resource.name": team,
                         RESOURCE_TEAM: team},
               payload={"actor": actor(), "team": team, "reason": reason, **payload})

"""Changes to the saved scheduling policy (`yoloq-policy` block): one team's weight, tier cap and
Training Unit quota, or any other key (`yoloq policy set`). Shared by `yoloq quota`, `yoloq team`,
`yoloq policy` and the API's admin routes; the scheduler re-reads the block within 30 s, so what
is saved here is what it enforces, unless an environment variable of the stack overrides the key.

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
    """Apply `change(block)` to the saved block (the first change: to the defaults) and save it."""
    from blocks.policy import POLICY_BLOCK, SchedulingPolicy, saved_block

    with _LOCK:
        block = saved_block() or SchedulingPolicy()  # stored values only: an env override stays explicit
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


SET_BY_TEAM_COMMANDS = {"team_weights": "yoloq team add NAME --weight W", "tier_caps": "yoloq team add NAME --cap TIER",
                        "quotas": "yoloq quota TEAM --tu X"}


def settable_keys() -> tuple[str, ...]:
    """The policy keys `yoloq policy set` takes (per-team maps have their own commands)."""
    from blocks.policy import policy_keys

    return tuple(k for k in policy_keys() if k not in SET_BY_TEAM_COMMANDS)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """`["min_runtime_s=0", ...]` -> {key: raw value}; an unknown key or a missing `=` is one line."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(item or "KEY=VALUE", "is not KEY=VALUE", "write e.g. min_runtime_s=0")
        check_settable(key)
        values[key] = value.strip()
    if not values:
        raise UserError("KEY=VALUE", "none given", "write e.g. yoloq policy set min_runtime_s=0")
    return values


def check_settable(key: str) -> None:
    if key in SET_BY_TEAM_COMMANDS:
        raise UserError(key, "is set per team", f"use `{SET_BY_TEAM_COMMANDS[key]}`")
    if key not in settable_keys():
        raise UserError(key, "is not a policy key", f"use one of: {', '.join(settable_keys())}")


def set_policy_keys(values: dict[str, str]) -> dict[str, Any]:
    """Check `values` against the block's types and ranges, then save them; returns the typed
    values saved. A bad value is one line naming the key; nothing is saved unless all are good."""
    from pydantic import ValidationError

    from blocks.policy import SchedulingPolicy

    for key in values:
        check_settable(key)
    try:
        typed = SchedulingPolicy.model_validate({**SchedulingPolicy().values(), **values})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "policy"
        raise UserError(key, f"{error['msg'].lower()}, not {values.get(key)!r}",
                        f"give {key} a valid value (`yoloq policy show` lists the current ones)") from None
    saved = {key: getattr(typed, key) for key in values}

    def change(block) -> None:
        for key, value in saved.items():
            setattr(block, key, value)

    edit_policy(change)
    emit_policy_event(saved)
    return saved


def emit_policy_event(changed: dict[str, Any]) -> None:
    """A `yoloq.policy.changed` audit event naming the acting caller and the keys set."""
    from prefect.events import emit_event

    from yoloq.records.events import actor

    from yoloq.domain.contract import POLICY_CHANGED_EVENT, POLICY_RESOURCE

    emit_event(event=POLICY_CHANGED_EVENT,
               resource={"prefect.resource.id": POLICY_RESOURCE, "prefect.resource.name": "yoloq-policy"},
               payload={"actor": actor(), "changed": changed})


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

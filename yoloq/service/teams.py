"""Teams: add, remove and list them with their limits (weight, tier cap, quota), set limits and
quotas, and record each change. Shared by `yoloq team` and `/v1/teams`; the team store
(`yoloq.records.teams.TeamStore`) holds tokens, the policy block holds the limits."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from yoloq.base.errors import UserError
from yoloq.domain.tiers import TIER_NAMES
from yoloq.service.connection import stack_client

NO_STACK_LIMITS_NOTE = "no stack answers, so the team's weight, cap and quota stay in the policy"
NO_STACK_LIST_NOTE = "no stack answers, so weights, caps and quotas are not shown"


@dataclass(frozen=True)
class TeamListing:
    rows: list[dict[str, Any]]  # team, owner, admin, label, token_id (+ weight, cap, quota)
    notes: tuple[str, ...] = field(default_factory=tuple)


def add_team(store: Any, name: str, weight: float | None = None, cap: str | None = None, owner: str = "",
             admin: bool = False, label: str = "default", actor: str | None = None) -> str:
    """Check, save the team's limits in the policy (if given), then add it; returns its token."""
    from yoloq.records.teams import check_team_name

    check_team_name(name)
    if cap is not None and cap not in TIER_NAMES:
        raise UserError("cap", f"unknown tier {cap!r}", f"use one of: {', '.join(TIER_NAMES)}")
    if weight is not None and weight <= 0:
        raise UserError("weight", f"{weight} is not a positive weight", "give a weight above 0, e.g. 2")
    if name in store.teams():
        raise UserError("team", f"{name!r} already exists",
                        f"rotate its token with `yoloq team rotate {name}`, or pick another name")
    if weight is not None or cap is not None:
        _with_policy(actor, lambda: set_limits(name, weight, cap))
    return store.add(name, owner=owner, admin=admin, label=label)


def remove_team(store: Any, name: str, actor: str | None = None) -> tuple[str, ...]:
    """Remove the team from the store, and its weight, cap and quota from the policy when a stack
    answers; returns the notes (what could not be done)."""
    from yoloq.records.policy_edit import forget_team

    store.get(name)
    notes: tuple[str, ...] = ()
    if stack_answers():
        _with_policy(actor, lambda: forget_team(name))
    else:
        notes = (NO_STACK_LIMITS_NOTE,)
    store.remove(name)
    return notes


def list_teams(store: Any) -> TeamListing:
    """Every team (no secrets), with its limits from the policy in force when a stack answers."""
    rows: list[dict[str, Any]] = [entry.public() for _, entry in sorted(store.teams().items())]
    if not stack_answers():
        return TeamListing(rows, (NO_STACK_LIST_NOTE,))
    from yoloq.records.policy_edit import team_limits

    with stack_client():
        from blocks.policy import load_policy

        policy = load_policy()
    return TeamListing([{**row, **team_limits(policy, row["team"])} for row in rows])


def set_limits(name: str, weight: float | None, cap: str | None) -> None:
    """The team's weight and tier cap in the policy block (the caller has a stack client open)."""
    from yoloq.records.policy_edit import set_limits as save_limits

    save_limits(name, weight, cap)


def change_limits(name: str, weight: float | None, cap: str | None, actor: str) -> None:
    _with_policy(actor, lambda: set_limits(name, weight, cap))


def change_quota(name: str, tu: float | None, period: str, reason: str, actor: str) -> Any:
    """Set or clear (tu None) a team's quota; returns the old one."""
    from yoloq.records.policy_edit import set_quota

    found: list[Any] = []
    _with_policy(actor, lambda: found.append(set_quota(name, tu, period, reason)))
    return found[0]


def record_team_event(kind: str, team: str, actor: str, reason: str, **payload: Any) -> None:
    """`yoloq.team.<kind>` with `actor` (an admin through the API)."""
    from yoloq.records.policy_edit import emit_team_event

    _with_policy(actor, lambda: emit_team_event(kind, team, reason, **payload))


def stack_answers() -> bool:
    from yoloq.ops.stack import current_stack, healthy

    return healthy(current_stack())


def _with_policy(actor: str | None, change: Callable[[], Any]) -> None:
    from yoloq.records.events import acting_as

    with stack_client(), (acting_as(actor) if actor else nullcontext()):
        change()

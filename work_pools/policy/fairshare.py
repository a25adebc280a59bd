"""Weighted fair share between teams, over usage in Training Units (TU).

1 TU = one V100 for 24 h (`yoloq.gpus`). A team's usage decays exponentially
with `usage_half_life_s`; its entitlement is weight / sum of the weights of the
teams that currently want GPUs. `share_ratio` = (usage share) / entitlement:
below 1 the team is owed GPU time. The ledger is plain data that the worker
(or the simulator) keeps and updates with `charge`; `decide` only reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from work_pools.policy.model import Policy, QuotaBreach
from yoloq.domain.gpus import TU_SECONDS

_DAY = 86400.0
_MONDAY_OFFSET = 4 * _DAY  # 1970-01-01 was a Thursday


def tu(gpu_speed: float, seconds: float, gpus: int = 1) -> float:
    """Training Units for `gpus` devices of relative `gpu_speed` over `seconds`."""
    return gpus * gpu_speed * seconds / TU_SECONDS


def decay(usage: Mapping[str, float], elapsed_s: float, half_life_s: float) -> dict[str, float]:
    if half_life_s <= 0 or elapsed_s <= 0:
        return dict(usage)
    factor = math.pow(0.5, elapsed_s / half_life_s)
    return {team: value * factor for team, value in usage.items()}


def period_start(now: float, period: str) -> float:
    """Start of the UTC day, or of the ISO week (Monday), holding `now`."""
    if period == "week":
        return (now - _MONDAY_OFFSET) // (7 * _DAY) * (7 * _DAY) + _MONDAY_OFFSET
    return now // _DAY * _DAY


@dataclass(frozen=True)
class UsageLedger:
    """Decayed usage (fair share) and each team's spend in its current quota period."""

    decayed_tu: dict[str, float] = field(default_factory=dict)
    period_tu: dict[str, float] = field(default_factory=dict)
    updated_at: float = 0.0


def charge(ledger: UsageLedger, charges_tu: Mapping[str, float], now: float,
           policy: Policy) -> UsageLedger:
    """A new ledger: decay to `now`, add `charges_tu`, restart the quota period if one began."""
    decayed = decay(ledger.decayed_tu, now - ledger.updated_at, policy.usage_half_life_s)
    spent = {team: amount for team, amount in ledger.period_tu.items()
             if _same_period(ledger.updated_at, now, _period_of(team, policy))}
    for team, amount in charges_tu.items():
        decayed[team] = decayed.get(team, 0.0) + amount
        spent[team] = spent.get(team, 0.0) + amount
    return UsageLedger(decayed, spent, now)


def _period_of(team: str, policy: Policy) -> str:
    quota = policy.quotas.get(team)
    return quota.period if quota else "day"


def _same_period(then: float, now: float, period: str) -> bool:
    return period_start(then, period) == period_start(now, period)


def entitlements(teams: Iterable[str], policy: Policy) -> dict[str, float]:
    teams = sorted(set(teams))
    total = sum(policy.weight(t) for t in teams) or 1.0
    return {t: policy.weight(t) / total for t in teams}


def share_ratios(usage: Mapping[str, float], teams: Iterable[str], policy: Policy) -> dict[str, float]:
    """usage share / entitlement per team; 0 when nobody used anything yet."""
    owed = entitlements(teams, policy)
    total = sum(max(0.0, usage.get(t, 0.0)) for t in owed)
    if total <= 0:
        return {t: 0.0 for t in owed}
    return {t: (max(0.0, usage.get(t, 0.0)) / total) / e for t, e in owed.items()}


def normalised_usage(usage_tu: float, team: str, policy: Policy) -> float:
    """The fair-share sort key: usage per unit of weight (lowest is furthest below its share)."""
    return usage_tu / max(policy.weight(team), 1e-9)


def quota_breaches(period_tu: Mapping[str, float], policy: Policy) -> tuple[QuotaBreach, ...]:
    """Teams whose spend in the current period reached their budget."""
    found = []
    for team, quota in sorted(policy.quotas.items()):
        spent = period_tu.get(team, 0.0)
        if spent >= quota.tu:
            found.append(QuotaBreach(team, spent, quota.tu, quota.period))
    return tuple(found)

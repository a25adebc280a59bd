"""Usage so far: what the policy reads about the past, as plain frozen data: fair-share
usage, quota spend, and per job the service attained (LAS) and the intervals it held GPUs.

It is built fresh each pass from the segment runs' own records in Prefect
(`work_pools.usage.ledger_state`); nothing here is persisted by a node. The
functions below answer the questions `work_pools.scheduling` asks of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from work_pools.policy.fairshare import UsageLedger, period_start
from work_pools.policy.model import Policy


@dataclass(frozen=True)
class JobUsage:
    attained_gpu_s: float = 0.0  # GPUs x seconds, all time (LAS)
    held: tuple[tuple[float, float], ...] = ()  # GPU-holding intervals inside the window

    @property
    def last_held_at(self) -> float | None:
        return self.held[-1][1] if self.held else None


@dataclass(frozen=True)
class UsageState:
    usage: UsageLedger = field(default_factory=UsageLedger)
    jobs: dict[str, JobUsage] = field(default_factory=dict)
    notified: dict[str, float] = field(default_factory=dict)  # breach key -> when notified
    polled_at: float | None = None


def held_window_s(state: UsageState, job_id: str, now: float, window_s: float) -> float:
    """Seconds `job_id` held a GPU within the last `window_s` (the 70% rule)."""
    usage = state.jobs.get(job_id)
    if usage is None:
        return 0.0
    start = now - window_s
    return sum(max(0.0, min(b, now) - max(a, start)) for a, b in usage.held)


def attained_gpu_s(state: UsageState, job_id: str) -> float:
    usage = state.jobs.get(job_id)
    return usage.attained_gpu_s if usage else 0.0


def last_held_at(state: UsageState, job_id: str) -> float | None:
    usage = state.jobs.get(job_id)
    return usage.last_held_at if usage else None


def period_spend(state: UsageState, now: float, policy: Policy) -> dict[str, float]:
    """Each team's spend in the quota period holding `now` (0 once a new period began)."""
    then = state.usage.updated_at
    return {team: spent for team, spent in state.usage.period_tu.items()
            if period_start(then, _period(team, policy)) == period_start(now, _period(team, policy))}


def _period(team: str, policy: Policy) -> str:
    quota = policy.quotas.get(team)
    return quota.period if quota else "day"

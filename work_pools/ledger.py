"""The worker's usage ledger: fair-share usage, quota spend, and who held GPUs lately.

Every poll the worker charges its running segments for the time since the last
poll: Training Units per team (GPU speed from `yoloq.gpus`, a declared CPU slot at
CPU speed) into the decayed fair-share usage and the quota period's spend
(`work_pools.policy.fairshare.charge`), plus per job the GPU-seconds attained and
the intervals it held a GPU (the 70% rule looks at the rolling window). The state
is plain frozen data updated by pure functions; `UsageKeeper` persists it.

Persistence: the embedded profile keeps one JSON file, `<state>/ledger.json`,
rewritten atomically after each poll, so a restarted worker keeps usage, spend
and the quota breaches it already notified. A cluster with several workers must
share one ledger (each worker charges only its own segments, so the charges add
up; keep the file on shared storage with one writer, or move the JSON into a
Prefect Variable); separate files would give each node its own fair share.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from uuid import UUID

from work_pools.policy.fairshare import UsageLedger, charge, period_start, tu
from work_pools.policy.model import Policy

LEDGER_FILE = "ledger.json"
RETAIN_JOB_S = 7 * 86400.0  # forget a job's attained service a week after it last ran
RETAIN_NOTIFIED_S = 8 * 86400.0  # longer than the longest quota period
SAVE_IDLE_EVERY_S = 60.0  # with nothing running, the file is rewritten at most once a minute


@dataclass(frozen=True)
class RunningCharge:
    """One running segment, as the ledger charges it."""

    job_id: str
    team: str
    started_at: float
    gpu_speeds: tuple[float, ...]  # one entry per GPU it holds


@dataclass(frozen=True)
class JobUsage:
    attained_gpu_s: float = 0.0  # GPUs x seconds, all time (LAS)
    held: tuple[tuple[float, float], ...] = ()  # GPU-holding intervals inside the window

    @property
    def last_held_at(self) -> float | None:
        return self.held[-1][1] if self.held else None


@dataclass(frozen=True)
class LedgerState:
    usage: UsageLedger = field(default_factory=UsageLedger)
    jobs: dict[str, JobUsage] = field(default_factory=dict)
    notified: dict[str, float] = field(default_factory=dict)  # breach key -> when notified
    polled_at: float | None = None


def record(state: LedgerState, running: Iterable[RunningCharge], now: float,
           policy: Policy) -> LedgerState:
    """Charge `running` for the time since the last poll (never before its start)."""
    charges: dict[str, float] = {}
    jobs = dict(state.jobs)
    for seg in running:
        since = seg.started_at if state.polled_at is None else max(state.polled_at, seg.started_at)
        seconds = max(0.0, now - since)
        if seconds <= 0:
            continue
        charges[seg.team] = charges.get(seg.team, 0.0) + sum(tu(s, seconds) for s in seg.gpu_speeds)
        jobs[seg.job_id] = _hold(jobs.get(seg.job_id, JobUsage()), since, now,
                                 len(seg.gpu_speeds) * seconds)
    jobs = {job: _prune(usage, now, policy.long_job_window_s) for job, usage in jobs.items()
            if _recent(usage, now)}
    notified = {k: t for k, t in state.notified.items() if now - t < RETAIN_NOTIFIED_S}
    return LedgerState(charge(state.usage, charges, now, policy), jobs, notified, now)


def _hold(usage: JobUsage, start: float, end: float, gpu_s: float) -> JobUsage:
    held = list(usage.held)
    if held and start <= held[-1][1] + 1e-6:
        held[-1] = (held[-1][0], max(end, held[-1][1]))
    else:
        held.append((start, end))
    return JobUsage(usage.attained_gpu_s + gpu_s, tuple(held))


def _prune(usage: JobUsage, now: float, window_s: float) -> JobUsage:
    kept = tuple((max(a, now - window_s), b) for a, b in usage.held if b > now - window_s)
    # keep the last interval even outside the window: it says when the job last ran
    if not kept and usage.held:
        kept = (usage.held[-1],)
    return replace(usage, held=kept)


def _recent(usage: JobUsage, now: float) -> bool:
    last = usage.last_held_at
    return last is None or now - last < RETAIN_JOB_S


def held_window_s(state: LedgerState, job_id: str, now: float, window_s: float) -> float:
    """Seconds `job_id` held a GPU within the last `window_s` (the 70% rule)."""
    usage = state.jobs.get(job_id)
    if usage is None:
        return 0.0
    start = now - window_s
    return sum(max(0.0, min(b, now) - max(a, start)) for a, b in usage.held)


def attained_gpu_s(state: LedgerState, job_id: str) -> float:
    usage = state.jobs.get(job_id)
    return usage.attained_gpu_s if usage else 0.0


def last_held_at(state: LedgerState, job_id: str) -> float | None:
    usage = state.jobs.get(job_id)
    return usage.last_held_at if usage else None


def period_spend(state: LedgerState, now: float, policy: Policy) -> dict[str, float]:
    """Each team's spend in the quota period holding `now` (0 once a new period began)."""
    then = state.usage.updated_at
    return {team: spent for team, spent in state.usage.period_tu.items()
            if period_start(then, _period(team, policy)) == period_start(now, _period(team, policy))}


def _period(team: str, policy: Policy) -> str:
    quota = policy.quotas.get(team)
    return quota.period if quota else "day"


def with_notified(state: LedgerState, keys: Iterable[str], now: float) -> LedgerState:
    return replace(state, notified={**state.notified, **{k: now for k in keys}})


# -- persistence ----------------------------------------------------------------

def to_json(state: LedgerState) -> dict[str, Any]:
    return {
        "version": 1,
        "usage": {"decayed_tu": state.usage.decayed_tu, "period_tu": state.usage.period_tu,
                  "updated_at": state.usage.updated_at},
        "jobs": {job: {"attained_gpu_s": u.attained_gpu_s, "held": [list(i) for i in u.held]}
                 for job, u in state.jobs.items()},
        "notified": state.notified,
        "polled_at": state.polled_at,
    }


def from_json(data: Mapping[str, Any]) -> LedgerState:
    usage = data.get("usage") or {}
    jobs = {job: JobUsage(float(u.get("attained_gpu_s", 0.0)),
                          tuple((float(a), float(b)) for a, b in u.get("held", [])))
            for job, u in (data.get("jobs") or {}).items()}
    return LedgerState(
        UsageLedger(dict(usage.get("decayed_tu") or {}), dict(usage.get("period_tu") or {}),
                    float(usage.get("updated_at") or 0.0)),
        jobs, {k: float(v) for k, v in (data.get("notified") or {}).items()},
        data.get("polled_at"))


def default_path() -> Path:
    from yoloq.paths import state_paths

    return state_paths().root / LEDGER_FILE


def load(path: Path) -> LedgerState:
    """The saved ledger; an empty one when the file is missing or unreadable."""
    try:
        return from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return LedgerState()


def save(state: LedgerState, path: Path) -> None:
    """Atomic: a crash mid-write leaves the previous ledger intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ledger-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(to_json(state), fh, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UsageKeeper:
    """The worker's ledger holder: charge each poll, remember notified breaches, persist
    (after every poll with something running; at most once a minute when idle)."""

    def __init__(self, policy: Policy, path: Path | None = None) -> None:
        self.policy = policy
        self.path = path or default_path()
        self.state = load(self.path)
        self._saved_at = float("-inf")

    def charge_running(self, views: Iterable[Any], reserved: Mapping[UUID, tuple[int, ...]],
                       started_at: Mapping[UUID, float], gpus: Iterable[Any],
                       now: float) -> LedgerState:
        """Charge the worker's running segments (SegmentViews) up to `now`, then save."""
        speeds = gpu_speeds(gpus)
        running = [RunningCharge(v.job_id, v.team, started_at[v.flow_run_id],
                                 tuple(speeds.get(i, 1.0) for i in reserved.get(v.flow_run_id, ())))
                   for v in views if v.flow_run_id in started_at]
        self.state = record(self.state, running, now, self.policy)
        if running or now - self._saved_at >= SAVE_IDLE_EVERY_S:
            self.save(now)
        return self.state

    def save(self, now: float) -> None:
        save(self.state, self.path)
        self._saved_at = now

    def mark_notified(self, keys: Iterable[str], now: float) -> None:
        self.state = with_notified(self.state, keys, now)
        self.save(now)


def gpu_speeds(gpus: Iterable[Any]) -> dict[int, float]:
    """GPU index -> relative speed (TU rate), from the worker's inventory."""
    from work_pools.scheduling import gpu_speed

    return {g.index: gpu_speed(g) for g in gpus}

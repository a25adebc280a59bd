"""Usage from the source of truth: the segment flow runs' own records in Prefect.

Every number the policy needs about the past (fair-share usage, quota spend,
service attained for LAS, the 70% rule's window, when a job last held a GPU) is
computed from segment runs: start and end time (Prefect's own), job and team (the
run's plan), and the GPUs it held (labels the scheduler wrote when it admitted the
run: `yoloq.gpus`, `yoloq.gpu_speed`, `yoloq.node`). No node keeps a ledger file,
so restarting or losing a node changes no number.

`UsageBook` reads incrementally: a finished run's interval never changes, so it is
read once and cached; each refresh asks only for runs that are still open or
that ended since the previous refresh.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from work_pools.usage_state import JobUsage, UsageState
from work_pools.policy.fairshare import UsageLedger, period_start
from work_pools.policy.model import Policy
from work_pools.segments import segment_job_id
from yoloq.domain.contract import (BATCH_LABEL, GPU_NAME_LABEL, GPUS_LABEL, NODE_LABEL,  # noqa: F401
                                   SPEED_LABEL, plan_of)
from yoloq.domain.gpus import TU_SECONDS

RETAIN_S = 8 * 86400.0  # longer than the longest quota period (a week)
_PAGE = 200
_OVERLAP_S = 120.0  # re-read runs that ended shortly before the last refresh (clock skew)
_OPEN_STATES = ("RUNNING", "PENDING", "CANCELLING")  # started and not ended (see _open_filter)


@dataclass(frozen=True)
class SegmentInterval:
    """One segment run's hold of GPUs: [start, end) on `gpus` devices of relative `speed`."""

    run_id: str
    job_id: str
    team: str
    node: str
    start: float
    end: float | None  # None while the run is open
    gpus: int
    speed: float
    batch: int | None = None  # set when the scheduler admitted it with a reduced batch

    def seconds(self, now: float, since: float = float("-inf")) -> float:
        end = self.end if self.end is not None else now
        return max(0.0, min(end, now) - max(self.start, since))

    def gpu_seconds(self, now: float, since: float = float("-inf")) -> float:
        return self.gpus * self.seconds(now, since)

    def tu(self, now: float, since: float = float("-inf")) -> float:
        return self.speed * self.gpu_seconds(now, since) / TU_SECONDS


def interval_from_run(run: Any) -> SegmentInterval | None:
    """The interval of a segment flow run that started on GPUs the scheduler assigned."""
    labels = run.labels or {}
    if run.start_time is None or not labels.get(GPUS_LABEL):
        return None
    params = run.parameters or {}
    spec = params.get("spec") or {}
    gpus = [g for g in str(labels[GPUS_LABEL]).split(",") if g.strip()]
    end = run.end_time.timestamp() if run.end_time is not None else None
    return SegmentInterval(
        run_id=str(run.id), job_id=segment_job_id(run),
        team=str(plan_of(run).team or spec.get("team") or "default"),
        node=str(labels.get(NODE_LABEL, "")), start=run.start_time.timestamp(), end=end,
        gpus=len(gpus), speed=float(labels.get(SPEED_LABEL) or 1.0),
        batch=int(labels[BATCH_LABEL]) if labels.get(BATCH_LABEL) else None)


# -- pure: intervals -> the ledger the policy reads --------------------------------------

def ledger_state(intervals: Iterable[SegmentInterval], now: float, policy: Policy,
                 notified: dict[str, float] | None = None) -> UsageState:
    """Fair share (decayed TU), quota spend (this period), and per job the service attained
    and the intervals held, all at `now`."""
    decayed: dict[str, float] = {}
    spent: dict[str, float] = {}
    held: dict[str, list[tuple[float, float]]] = {}
    attained: dict[str, float] = {}
    for iv in intervals:
        end = min(iv.end if iv.end is not None else now, now)
        if end <= iv.start:
            continue
        decayed[iv.team] = decayed.get(iv.team, 0.0) + decayed_tu(iv, end, now, policy)
        since = period_start(now, _period(iv.team, policy))
        spent[iv.team] = spent.get(iv.team, 0.0) + iv.tu(now, since)
        attained[iv.job_id] = attained.get(iv.job_id, 0.0) + iv.gpu_seconds(now)
        held.setdefault(iv.job_id, []).append((iv.start, end))
    jobs = {job: JobUsage(attained[job], _merge(spans, now, policy.long_job_window_s))
            for job, spans in held.items()}
    return UsageState(UsageLedger(decayed, spent, now), jobs, dict(notified or {}), now)


def decayed_tu(iv: SegmentInterval, end: float, now: float, policy: Policy) -> float:
    """TU of [start, end) decayed to `now` with the policy's half-life (exact integral)."""
    rate = iv.gpus * iv.speed / TU_SECONDS
    half = policy.usage_half_life_s
    if half <= 0:
        return rate * (end - iv.start)
    k = math.log(2) / half
    return rate / k * (math.exp(-k * (now - end)) - math.exp(-k * (now - iv.start)))


def _merge(spans: list[tuple[float, float]], now: float, window_s: float) -> tuple[tuple[float, float], ...]:
    """Merged holding intervals inside the window, plus the last one (when it last ran)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1e-6:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    kept = [(max(a, now - window_s), b) for a, b in merged if b > now - window_s]
    return tuple(kept) if kept else tuple(merged[-1:])


def _period(team: str, policy: Policy) -> str:
    quota = policy.quotas.get(team)
    return quota.period if quota else "day"


# -- reading from Prefect --------------------------------------------------------------

class UsageBook:
    """Segment intervals of one pool, read incrementally from Prefect and cached."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.closed: dict[str, SegmentInterval] = {}
        self.open: dict[str, SegmentInterval] = {}
        self.read_until: float | None = None

    def intervals(self) -> list[SegmentInterval]:
        return [*self.closed.values(), *self.open.values()]

    async def refresh(self, client: Any, now: float,
                      open_runs: list[Any] | None = None) -> list[SegmentInterval]:
        """`open_runs`: the pool's open runs when the caller has just read them (the
        scheduler's pass), so they are not asked for twice."""
        since = (now - RETAIN_S) if self.read_until is None else self.read_until - _OVERLAP_S
        for run in await _runs(client, self.pool, _ended_since(since)):
            iv = interval_from_run(run)
            if iv is not None and iv.end is not None:
                self.closed[iv.run_id] = iv
        self.open = {}
        if open_runs is None:
            open_runs = await _runs(client, self.pool, _open_filter())
        for run in open_runs:
            if run.state is None or run.state.type.value not in _OPEN_STATES:
                continue
            iv = interval_from_run(run)
            if iv is not None and iv.run_id not in self.closed:
                self.open[iv.run_id] = iv
        self.closed = {k: v for k, v in self.closed.items() if (v.end or now) > now - RETAIN_S}
        self.read_until = now
        return self.intervals()


def _ended_since(since: float) -> Any:
    import datetime

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterEndTime

    moment = datetime.datetime.fromtimestamp(since, datetime.timezone.utc)
    return FlowRunFilter(end_time=FlowRunFilterEndTime(after_=moment))


def _open_filter() -> Any:
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterStartTime,
                                                FlowRunFilterState, FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    return FlowRunFilter(start_time=FlowRunFilterStartTime(is_null_=False),
                         state=FlowRunFilterState(type=FlowRunFilterStateType(
                             any_=[StateType.RUNNING, StateType.PENDING, StateType.CANCELLING])))


async def _runs(client: Any, pool: str, flow_run_filter: Any) -> list[Any]:
    """All flow runs of `pool` matching the filter, page by page."""
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    pool_filter = WorkPoolFilter(name=WorkPoolFilterName(any_=[pool]))
    found: list[Any] = []
    while True:
        page = await client.read_flow_runs(flow_run_filter=flow_run_filter,
                                           work_pool_filter=pool_filter, limit=_PAGE,
                                           offset=len(found))
        found.extend(page)
        if len(page) < _PAGE:
            return found


def usage_table(intervals: Iterable[SegmentInterval], now: float, since: float,
                team: str | None = None) -> list[dict[str, Any]]:
    """Rows per (team, job): GPU-seconds and Training Units since `since` (for `yoloq usage`)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for iv in intervals:
        if team and iv.team != team:
            continue
        gpu_s = iv.gpu_seconds(now, since)
        if gpu_s <= 0:
            continue
        row = rows.setdefault((iv.team, iv.job_id), {"team": iv.team, "job": iv.job_id,
                                                      "segments": 0, "gpu_s": 0.0, "tu": 0.0})
        row["segments"] += 1
        row["gpu_s"] += gpu_s
        row["tu"] += iv.tu(now, since)
    return sorted(rows.values(), key=lambda r: (r["team"], r["job"]))

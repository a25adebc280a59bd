"""What the web page and `/metrics` show, read from the existing sources (never recomputed):
the queue board (`yoloq.queueview`), a job's view and history (`yoloq.service.jobs`), usage from the segment runs (`work_pools.usage`), the policy in force
(`blocks.policy`), node records and the leader's stats (Prefect Variables), and the job's
MLflow run. Every function takes a sync Prefect client; none writes anything."""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from yoloq.domain.contract import (EPOCH_LABEL, GPUS_LABEL, NODE_LABEL, preempt_reason, preempted_by,
                                   start_epoch, was_preempted)
from yoloq.domain.tiers import Tier
from yoloq.domain.tasks import task_of_metrics


def queue(client: Any) -> list[dict[str, Any]]:
    """Running and waiting segments with position, ETA (interval) and reason."""
    from yoloq.views.queueview import queue_rows

    return queue_rows(client)


@dataclass
class Bar:
    """One segment on the timeline: [start, end) on `lane` (node/GPU)."""

    name: str
    lane: str
    start: float
    end: float
    state: str
    epochs: str
    open: bool = False
    preempted_by: str = ""
    preempt_reason: str = ""


@dataclass
class JobPage:
    job: Any  # yoloq.records.jobs.JobRecord (its runs, for the bars)
    timeline: list[dict[str, Any]]
    bars: list[Bar]
    mlflow: dict[str, Any] = field(default_factory=dict)
    view: Any = None  # yoloq.service.jobs.JobView: tier, state, progress, preemptions, weights


def job_page(client: Any, job_id: str, now: float | None = None) -> JobPage | None:
    """The job's page: the service's view and history (what `status` and `history` show), and
    the segment bars."""
    from yoloq.records.jobs import list_jobs
    from yoloq.service.jobs import history, job_view

    jobs = list_jobs(client, job_id)
    if not jobs:
        return None
    now = now or time.time()
    return JobPage(jobs[0], history(client, job_id),
                   [b for b in (segment_bar(s, now) for s in jobs[0].segments) if b], mlflow_run(job_id),
                   view=job_view(client, job_id, jobs[0]))


def segment_bar(seg: Any, now: float) -> Bar | None:
    """A segment's bar; None for a segment that never started."""
    if seg.start_time is None:
        return None
    labels = seg.labels or {}
    params = seg.parameters or {}
    first = start_epoch(seg)
    last = labels.get(EPOCH_LABEL, params.get("stop_after_epoch"))
    state = seg.state.name if seg.state else "?"
    final = bool(seg.state and seg.state.is_final())
    end = (seg.end_time or seg.state.timestamp).timestamp() if final else now
    preempted = was_preempted(seg)
    return Bar(name=seg.name, lane=f"{labels.get(NODE_LABEL, '?')} GPU {labels.get(GPUS_LABEL, '?')}",
               start=seg.start_time.timestamp(), end=max(end, seg.start_time.timestamp() + 1),
               state=state, epochs=f"epochs {first}\u2192{last}", open=not final,
               preempted_by=preempted_by(seg) if preempted else "",
               preempt_reason=preempt_reason(seg) if preempted else "")


MLFLOW_READ_S = 15.0  # how long the job page retries a transient MLflow error


def mlflow_run(job_id: str) -> dict[str, Any]:
    """The job's MLflow run: id, link (when the store is an MLflow server) and metric curves.
    A store that cannot be read is reported in `error` (shown on the page), not hidden."""
    from mlflow.tracking import MlflowClient

    from blocks import stores
    from yoloq.records.tracking import TAG_JOB_ID

    from yoloq.records.tracking import retrying

    def read() -> tuple[Any, Any, dict[str, Any]]:
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{TAG_JOB_ID}` = '{job_id}'",
                                  max_results=1) if exp else []
        if not runs:
            return exp, None, {}
        curves = {m: [(h.step, h.value) for h in client.get_metric_history(runs[0].info.run_id, m)]
                  for m in task_of_metrics(runs[0].data.metrics).curves}
        return exp, runs[0], curves

    try:
        uri, experiment = stores.mlflow_tracking_uri()
        client = MlflowClient(uri)
        # A SQLite store is locked while a segment writes ("database is locked"): a transient
        # error, asked again for a few seconds before the page says the store is unreadable.
        exp, run, curves = retrying("reading the job's run for its page", read, limit_s=MLFLOW_READ_S)
        if run is None:
            return {"uri": uri, "run_id": None, "curves": {}}
    except Exception as exc:  # noqa: BLE001 (shown on the page: the rest of it is still useful)
        return {"error": f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    link = (f"{uri.rstrip('/')}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}"
            if uri.startswith(("http://", "https://")) else None)
    return {"uri": uri, "run_id": run.info.run_id, "link": link,
            "curves": {m: sorted(c) for m, c in curves.items() if c}}


@dataclass
class TeamUsage:
    team: str
    spent_tu: float  # this quota period
    quota_tu: float | None
    period: str
    week_tu: float  # last 7 days


def usage(client: Any, now: float | None = None) -> list[TeamUsage]:
    """Training Units per team this period (what the quota counts) and over 7 days."""
    from blocks.policy import load_policy
    from work_pools.usage import ledger_state, usage_table

    now = now or time.time()
    policy = load_policy()
    intervals = segment_intervals(now)
    spent = ledger_state(intervals, now, policy).usage.period_tu
    week: dict[str, float] = {}
    for row in usage_table(intervals, now, now - 7 * 86400):
        week[row["team"]] = week.get(row["team"], 0.0) + row["tu"]
    teams = sorted(set(spent) | set(week) | set(policy.quotas))
    return [TeamUsage(t, spent.get(t, 0.0), policy.quotas[t].tu if t in policy.quotas else None,
                      policy.quotas[t].period if t in policy.quotas else "day", week.get(t, 0.0))
            for t in teams]


_BOOKS: dict[str, Any] = {}  # API URL -> this process's UsageBook (read incrementally)
_BOOKS_LOCK = threading.Lock()


def segment_intervals(now: float) -> list[Any]:
    """Every segment interval of the pool, through the scheduler's own reader. The book is
    kept between calls (one per Prefect API), so a scrape reads only runs open or ended since
    the last one, not eight days of runs."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.usage import UsageBook
    from yoloq.base.names import GPU_POOL

    async def read(book: UsageBook) -> list[Any]:
        async with get_client() as async_client:
            return await book.refresh(async_client, now)

    with _BOOKS_LOCK:  # one refresh at a time: the book is not thread-safe
        book = _BOOKS.setdefault(str(PREFECT_API_URL.value()), UsageBook(GPU_POOL))
        return run_coro_as_sync(read(book)) or []


def rules() -> dict[str, Any]:
    """The scheduling rules in force now, and where they come from."""
    from blocks.policy import resolve_policy_settings

    settings = resolve_policy_settings()
    p = settings.policy
    return {
        "source": settings.source,
        "tiers": [{"tier": t.label, "queue_priority": int(t)} for t in Tier],
        "ordering": p.ordering, "preemption": p.preemption,
        "weights": dict(sorted(p.team_weights.items())),
        "quotas": {t: {"tu": q.tu, "period": q.period} for t, q in sorted(p.quotas.items())},
        "tier_caps": {t: c.label for t, c in sorted(p.tier_caps.items())},
        "default_tier_cap": p.default_tier_cap.label,
        "min_runtime_s": p.min_runtime_s, "min_grace_s": settings.min_grace_s,
        "grace_epochs": settings.grace_epochs, "long_job_share": p.long_job_share,
        "long_job_window_s": p.long_job_window_s, "aging_step_s": p.aging_step_s,
        "aging_ceiling": p.aging_ceiling.label, "usage_half_life_s": p.usage_half_life_s,
        "share_gpus": p.share_gpus, "allow_reduced_batch": p.allow_reduced_batch,
    }


def iso(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

"""Prometheus metrics at `/metrics`, collected at scrape time from what Prefect already holds
(no extra daemon, no state in this process): node records (`yoloq-node-<name>` Variables),
the open and recent segment runs of the GPU pool, the queue board, the leader's stats
(`yoloq-scheduler-stats`), the policy's quotas, and each active job's MLflow run.

Histograms over recent segments are snapshots of a window (`WINDOW_S`), not counters that
only grow: read them with `histogram_quantile(0.9, yoloq_segment_wait_seconds_bucket)`
directly, without `rate()`. The README lists every metric with example queries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from yoloq.domain.tiers import Tier

WINDOW_S = 24 * 3600.0
WAIT_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
DURATION_BUCKETS = (30, 60, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600)
_LOG = logging.getLogger("yoloq.api.metrics")
router = APIRouter(include_in_schema=False)


class Scrape:
    """One scrape's reads, shared by the sources (the queue is read once)."""

    def __init__(self, client: Any, now: float) -> None:
        self.client, self.now = client, now
        self._rows: list[dict[str, Any]] | None = None

    def queue(self) -> list[dict[str, Any]]:
        from yoloq.views.queueview import queue_rows

        if self._rows is None:
            self._rows = queue_rows(self.client)
        return self._rows


class YoloqCollector:
    """Reads Prefect (and MLflow) once per scrape; a source that fails is logged and shows as
    `yoloq_scrape_source_up{source=...} 0` instead of its metrics."""

    def collect(self) -> Iterator[Metric]:
        from prefect.client.orchestration import get_client

        now = time.time()
        up = GaugeMetricFamily("yoloq_scrape_source_up", "1 when the source could be read in this "
                               "scrape, 0 when it failed (see the API server's log)", labels=["source"])
        took = GaugeMetricFamily("yoloq_scrape_source_seconds", "Time the source took in this "
                                 "scrape (keep the sum below the scrape timeout)", labels=["source"])
        with get_client(sync_client=True) as client:
            scrape = Scrape(client, now)
            for source, reader in _SOURCES:
                started = time.perf_counter()
                metrics, ok = _read_source(source, reader, scrape)
                yield from metrics
                up.add_metric([source], ok)
                took.add_metric([source], time.perf_counter() - started)
        yield up
        yield took


def _read_source(source: str, reader: Any, scrape: Scrape) -> tuple[list[Metric], int]:
    """The source's metrics and 1, or what it gave before it failed and 0."""
    metrics: list[Metric] = []
    try:
        metrics.extend(reader(scrape))
        return metrics, 1
    except Exception as exc:  # noqa: BLE001 (one source failing must not hide the rest)
        _LOG.error("metrics source %s failed: %s: %s", source, exc.__class__.__name__, exc)
        return metrics, 0


def _nodes(scrape: Scrape) -> Iterator[Metric]:
    client, now = scrape.client, scrape.now
    from work_pools.nodes import read_nodes_sync
    from work_pools.pool_scheduler import assignment
    from yoloq.base.stores import GPU_POOL

    busy = {(node, gpu) for run in open_pool_runs(client) for node, gpus in [assignment(run) or ("", ())]
            for gpu in gpus}
    slots = GaugeMetricFamily("yoloq_gpu_slots", "GPU slots a live node declares (1 per GPU)",
                              labels=["node", "gpu", "gpu_name"])
    used = GaugeMetricFamily("yoloq_gpu_busy", "1 while a segment holds the GPU", labels=["node", "gpu"])
    alive = GaugeMetricFamily("yoloq_node_up", "1 while the node's heartbeat is fresh", labels=["node"])
    age = GaugeMetricFamily("yoloq_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat",
                            labels=["node"])
    for node in read_nodes_sync(client, GPU_POOL):  # a node of another pool is no capacity here
        alive.add_metric([node.name], 1 if node.alive(now) else 0)
        age.add_metric([node.name], max(0.0, now - node.heartbeat_at))
        if not node.alive(now):  # a lost node's GPUs are no capacity (its record stays, up=0)
            continue
        for gpu in node.gpus:
            slots.add_metric([node.name, str(gpu.index), gpu.name], 1)
            used.add_metric([node.name, str(gpu.index)], 1 if (node.name, gpu.index) in busy else 0)
    yield from (slots, used, alive, age)


def _queue(scrape: Scrape) -> Iterator[Metric]:
    tiers = [t.label for t in Tier]
    waiting = dict.fromkeys(tiers, 0)
    running = dict.fromkeys(tiers, 0)
    for row in scrape.queue():
        (running if row["state"] == "running" else waiting)[row["tier"]] += 1
    length = GaugeMetricFamily("yoloq_queue_length", "Segments waiting for a GPU", labels=["tier"])
    active = GaugeMetricFamily("yoloq_running_segments", "Segments running (or starting)", labels=["tier"])
    for tier in tiers:
        length.add_metric([tier], waiting[tier])
        active.add_metric([tier], running[tier])
    yield from (length, active)


def _segments(scrape: Scrape) -> Iterator[Metric]:
    """Wait times (queued -> started), durations and preemptions of recent segments, per tier."""
    from work_pools.segments import segment_view

    waits: dict[str, list[float]] = {t.label: [] for t in Tier}
    lengths: dict[str, list[float]] = {t.label: [] for t in Tier}
    preempted = {t.label: 0 for t in Tier}
    for run in _recent_segments(scrape.client, scrape.now):
        if run.start_time is None:  # the filter also returns runs that never started
            continue
        tier = segment_view(run).tier.label
        queued = run.expected_start_time or run.created
        waits[tier].append(max(0.0, (run.start_time - queued).total_seconds()))
        if run.end_time is not None:
            lengths[tier].append(max(0.0, (run.end_time - run.start_time).total_seconds()))
        if run.state is not None and run.state.name == "Preempted":
            preempted[tier] += 1
    yield _histogram("yoloq_segment_wait_seconds", "Queued to started, segments started in the "
                     "last 24 h", waits, WAIT_BUCKETS)
    yield _histogram("yoloq_segment_duration_seconds", "Start to end, segments started in the "
                     "last 24 h that ended", lengths, DURATION_BUCKETS)
    family = GaugeMetricFamily("yoloq_preemptions_24h", "Segments of this tier preempted among those "
                               "started in the last 24 h", labels=["tier"])
    for tier, count in preempted.items():
        family.add_metric([tier], count)
    yield family


def _histogram(name: str, doc: str, values: dict[str, list[float]],
               bounds: tuple[float, ...]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["tier"])
    for tier, xs in values.items():
        buckets = [(_le(b), sum(1 for x in xs if x <= b)) for b in bounds] + [("+Inf", len(xs))]
        family.add_metric([tier], buckets, sum_value=sum(xs))
    return family


def _le(bound: float) -> str:
    return str(float(bound))


def _scheduler(scrape: Scrape) -> Iterator[Metric]:
    from work_pools.lease import STATS_VARIABLE

    variable = scrape.client.read_variable_by_name(STATS_VARIABLE)
    stats = variable.value if variable is not None and isinstance(variable.value, dict) else {}
    decide = GaugeMetricFamily("yoloq_scheduler_decide_seconds", "Time of one policy decision "
                               "(quantile over the leader's recent passes)", labels=["quantile"])
    passes = GaugeMetricFamily("yoloq_scheduler_pass_seconds", "Time of one scheduling pass, "
                               "reads and writes included (quantile over recent passes)",
                               labels=["quantile"])
    for q, key in (("0.5", "p50"), ("0.95", "p95")):
        if f"decide_ms_{key}" in stats:
            decide.add_metric([q], stats[f"decide_ms_{key}"] / 1000.0)
        if f"pass_ms_{key}" in stats:
            passes.add_metric([q], stats[f"pass_ms_{key}"] / 1000.0)
    age = GaugeMetricFamily("yoloq_scheduler_stats_age_seconds", "Seconds since the leader last "
                            "published its stats")
    if "at" in stats:
        age.add_metric([], max(0.0, scrape.now - float(stats["at"])))
    yield from (decide, passes, age)


def _usage(scrape: Scrape) -> Iterator[Metric]:
    from yoloq.api.web_data import usage

    spent = GaugeMetricFamily("yoloq_team_usage_tu", "Training Units spent in the team's current "
                              "quota period", labels=["team", "period"])
    quota = GaugeMetricFamily("yoloq_team_quota_tu", "The team's quota per period", labels=["team", "period"])
    week = GaugeMetricFamily("yoloq_team_usage_7d_tu", "Training Units over the last 7 days", labels=["team"])
    for row in usage(scrape.client, scrape.now):
        spent.add_metric([row.team, row.period], row.spent_tu)
        week.add_metric([row.team], row.week_tu)
        if row.quota_tu is not None:
            quota.add_metric([row.team, row.period], row.quota_tu)
    yield from (spent, quota, week)


def _job_map(scrape: Scrape) -> Iterator[Metric]:
    """Latest mAP50-95 of each job with a segment running or waiting (one MLflow query)."""
    from mlflow.tracking import MlflowClient

    from yoloq.base import stores
    from yoloq.records.tracking import TAG_JOB_ID

    teams = {row["job"]: row["team"] for row in scrape.queue()}
    family = GaugeMetricFamily("yoloq_job_map50_95", "Latest validation mAP50-95 of an active job",
                               labels=["job", "team"])
    if teams:
        uri, experiment = stores.mlflow_tracking_uri()
        mlflow = MlflowClient(uri)
        exp = mlflow.get_experiment_by_name(experiment)
        runs = mlflow.search_runs([exp.experiment_id], max_results=500, order_by=["attributes.start_time DESC"]) if exp else []
        for run in runs:
            job = run.data.tags.get(TAG_JOB_ID)
            value = run.data.metrics.get("metrics/mAP50-95B")
            if job in teams and value is not None:
                family.add_metric([job, teams[job]], value)
    yield family


def open_pool_runs(client: Any, scheduled: bool = False) -> list[Any]:
    """The GPU pool's segment runs that hold (or are starting on) GPUs; with `scheduled`, the
    waiting ones too (what a scheduler pass reads)."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    states = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]
    states += [StateType.SCHEDULED] if scheduled else []
    return _pool_runs(client, FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
        any_=states))))


def _recent_segments(client: Any, now: float) -> list[Any]:
    import datetime

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStartTime

    since = datetime.datetime.fromtimestamp(now - WINDOW_S, datetime.timezone.utc)
    return _pool_runs(client, FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since)))


def _pool_runs(client: Any, flow_run_filter: Any, page: int = 200) -> list[Any]:
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    from yoloq.base.stores import GPU_POOL

    pool = WorkPoolFilter(name=WorkPoolFilterName(any_=[GPU_POOL]))
    found: list[Any] = []
    while True:
        batch = client.read_flow_runs(flow_run_filter=flow_run_filter, work_pool_filter=pool,
                                      limit=page, offset=len(found))
        found.extend(batch)
        if len(batch) < page:
            return found


_SOURCES = (("nodes", _nodes), ("queue", _queue), ("segments", _segments),
            ("scheduler", _scheduler), ("usage", _usage), ("mlflow", _job_map))
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(YoloqCollector())


@router.get("/metrics")
def metrics() -> Response:
    """The Prometheus text format, collected now."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

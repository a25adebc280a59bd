"""Prometheus metrics at `/metrics`, collected at scrape time from what Prefect already holds
(no extra daemon): node records (`yoloq-node-<name>` Variables), the GPU pool's segment runs
and the job runs, the queue board, the leader's stats (`yoloq-scheduler-stats`), the policy's
quotas, and each active job's MLflow run.

Conventional types: counters (`*_total`) and histograms (`*_bucket`, `*_sum`, `*_count`) are
totals since the queue began, counted from the run records (`yoloq.api.metrics_totals`), so
they only grow and survive an API restart: let Prometheus take windows
(`increase(yoloq_preemptions_total[24h])`,
`histogram_quantile(0.95, sum by (le) (rate(yoloq_queue_wait_seconds_bucket[1h])))`). Gauges
are what holds now (queue depth, GPUs busy, running segments). docs/reference/metrics.md
lists every metric (`python -m yoloq.api.metrics_doc` writes it from `REGISTRY`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from yoloq.api.metrics_catalogue import CATALOGUE
from yoloq.api.metrics_catalogue import family as catalogue_family
from yoloq.api.metrics_reads import open_pool_runs, read_jobs, read_segments

from yoloq.api.metrics_totals import Histogram, RecordTotals, Totals
from yoloq.base.histogram import CumulativeHistogram
from yoloq.domain.tiers import Tier

__all__ = ["REGISTRY", "TOTALS", "YoloqCollector", "open_pool_runs", "router", "totals_families",
           "was_preempted"]
_LOG = logging.getLogger("yoloq.api.metrics")
router = APIRouter(include_in_schema=False)


class Scrape:
    """One scrape's reads, shared by the sources (the queue is read once)."""

    def __init__(self, client: Any, now: float) -> None:
        self.client, self.now = client, now
        self._rows: list[dict[str, Any]] | None = None
        self._open: list[Any] | None = None

    def queue(self) -> list[dict[str, Any]]:
        from yoloq.views.queueview import queue_rows

        if self._rows is None:
            self._rows = queue_rows(self.client)
        return self._rows

    def open_runs(self) -> list[Any]:
        """The pool's segment runs holding (or starting on) GPUs."""
        if self._open is None:
            self._open = open_pool_runs(self.client)
        return self._open


class YoloqCollector:
    """Reads Prefect (and MLflow) once per scrape; a source that fails is logged and shows as
    `yoloq_scrape_source_up{source=...} 0` instead of its metrics."""

    def describe(self) -> Iterator[Metric]:
        """Every family this collector can yield, without samples (no Prefect read)."""
        for spec in CATALOGUE:
            yield spec.family()

    def collect(self) -> Iterator[Metric]:
        from prefect.client.orchestration import get_client

        now = time.time()
        up = catalogue_family("yoloq_scrape_source_up")
        took = catalogue_family("yoloq_scrape_source_seconds")
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
    from yoloq.base.names import GPU_POOL

    busy = {(node, gpu) for run in scrape.open_runs() for node, gpus in [assignment(run) or ("", ())]
            for gpu in gpus}
    slots = catalogue_family("yoloq_gpu_slots")
    used = catalogue_family("yoloq_gpu_busy")
    alive = catalogue_family("yoloq_node_up")
    age = catalogue_family("yoloq_node_heartbeat_age_seconds")
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
    length = catalogue_family("yoloq_queue_length")
    active = catalogue_family("yoloq_running_segments")
    for tier in tiers:
        length.add_metric([tier], waiting[tier])
        active.add_metric([tier], running[tier])
    yield from (length, active)


def was_preempted(run: Any) -> bool:
    """Whether a segment run ended preempted (`yoloq.domain.contract.was_preempted`, the one
    definition: a victim killed after its grace counts too)."""
    from yoloq.domain.contract import was_preempted as preempted

    return preempted(run)


TOTALS = RecordTotals(read_segments, read_jobs, was_preempted)
"""This process's running count of the run records (see `yoloq.api.metrics_totals`)."""


def _totals(scrape: Scrape) -> Iterator[Metric]:
    """Counters and histograms: totals over every job and segment run Prefect holds."""
    live_epochs = TOTALS.refresh(scrape.client, scrape.open_runs(), scrape.now)
    yield from totals_families(TOTALS.totals, live_epochs)


def totals_families(totals: Totals, live_epochs: Counter[tuple[str, ...]]) -> Iterator[Metric]:
    submitted = catalogue_family("yoloq_jobs_submitted")
    for labels, count in sorted(totals.submitted.items()):
        submitted.add_metric(list(labels), count)
    yield submitted
    for outcome in ("completed", "failed", "cancelled"):
        family = catalogue_family(f"yoloq_jobs_{outcome}")
        for (kind, team, tier), count in sorted(totals.jobs_ended.items()):
            if kind == outcome:
                family.add_metric([team, tier], count)
        yield family
    ended = catalogue_family("yoloq_segments_ended")
    for labels, count in sorted(totals.segments_ended.items()):
        ended.add_metric(list(labels), count)
    yield ended
    preempted = catalogue_family("yoloq_preemptions")
    for labels, count in sorted(totals.preemptions.items()):
        preempted.add_metric(list(labels), count)
    yield preempted
    epochs = catalogue_family("yoloq_epochs_trained")
    for labels in sorted(set(totals.epochs) | set(live_epochs)):
        epochs.add_metric(list(labels), totals.epochs[labels] + live_epochs[labels])
    yield epochs
    yield _histogram("yoloq_queue_wait_seconds", totals.waits)
    yield _histogram("yoloq_segment_duration_seconds", totals.durations)


def _histogram(name: str, values: Histogram) -> Metric:
    family = catalogue_family(name)
    for labels, series in sorted(values.series.items()):
        family.add_metric(list(labels), series.buckets(), sum_value=series.sum)
    return family


def _scheduler(scrape: Scrape) -> Iterator[Metric]:
    from work_pools.lease import STATS_VARIABLE

    variable = scrape.client.read_variable_by_name(STATS_VARIABLE)
    stats = variable.value if variable is not None and isinstance(variable.value, dict) else {}
    decide = catalogue_family("yoloq_scheduler_recent_decide_seconds")
    passes = catalogue_family("yoloq_scheduler_recent_pass_seconds")
    for q, key in (("0.5", "p50"), ("0.95", "p95")):
        if f"decide_ms_{key}" in stats:
            decide.add_metric([q], stats[f"decide_ms_{key}"] / 1000.0)
        if f"pass_ms_{key}" in stats:
            passes.add_metric([q], stats[f"pass_ms_{key}"] / 1000.0)
    age = catalogue_family("yoloq_scheduler_stats_age_seconds")
    if "at" in stats:
        age.add_metric([], max(0.0, scrape.now - float(stats["at"])))
    yield from (decide, passes, age)
    yield from _timing_histograms(stats)


def _timing_histograms(stats: dict[str, Any]) -> Iterator[Metric]:
    """Decision and pass times as histograms, from the cumulative buckets the leader publishes
    (`decide_histogram`, `pass_histogram`: {"bounds", "counts", "sum"}; counts per bound, then
    +Inf). A leader that does not publish them leaves these families without samples."""
    for key, name in (("decide_histogram", "yoloq_scheduler_decide_seconds"),
                      ("pass_histogram", "yoloq_scheduler_pass_seconds")):
        family = catalogue_family(name)
        published = stats.get(key)
        if isinstance(published, dict):
            series = CumulativeHistogram.from_dict(published)
            family.add_metric([], series.buckets(), sum_value=series.sum)
        yield family


def _usage(scrape: Scrape) -> Iterator[Metric]:
    from yoloq.api.web_data import usage

    spent = catalogue_family("yoloq_team_usage_tu")
    quota = catalogue_family("yoloq_team_quota_tu")
    week = catalogue_family("yoloq_team_usage_7d_tu")
    for row in usage(scrape.client, scrape.now):
        spent.add_metric([row.team, row.period], row.spent_tu)
        week.add_metric([row.team], row.week_tu)
        if row.quota_tu is not None:
            quota.add_metric([row.team, row.period], row.quota_tu)
    yield from (spent, quota, week)


def _job_map(scrape: Scrape) -> Iterator[Metric]:
    """Latest mAP50-95 of each job with a segment running or waiting (one MLflow query)."""
    from mlflow.tracking import MlflowClient

    from blocks import stores
    from yoloq.records.tracking import TAG_JOB_ID

    teams = {row["job"]: row["team"] for row in scrape.queue()}
    family = catalogue_family("yoloq_job_map50_95")
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


_SOURCES = (("nodes", _nodes), ("queue", _queue), ("records", _totals),
            ("scheduler", _scheduler), ("usage", _usage), ("mlflow", _job_map))
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(YoloqCollector())


@router.get("/metrics")
def metrics() -> Response:
    """The Prometheus text format, collected now."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

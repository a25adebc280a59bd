"""Every metric `/metrics` exports: name, type, labels and meaning, in one table.

The collector builds each family from here (`family(name)`), and the reference page
(docs/reference/metrics.md) is rendered from here (`yoloq.api.metrics_doc`), so the two
cannot disagree. Counter names are written without `_total`, which the exposition adds.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

_KINDS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    help: str
    source: str  # the collector's source that reads it (`yoloq_scrape_source_up{source=...}`)

    @property
    def exported(self) -> str:
        """The name a query uses (counters end in `_total`; histograms add `_bucket` etc.)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name

    def family(self) -> Metric:
        return _KINDS[self.kind](self.name, self.help, labels=list(self.labels))


TEAM_TIER = ("team", "tier")
CATALOGUE: tuple[MetricSpec, ...] = (
    # counters: totals over Prefect's run records, since the queue began
    MetricSpec("yoloq_jobs_submitted", "counter", TEAM_TIER, "Jobs submitted (tier as submitted).", "records"),
    MetricSpec("yoloq_jobs_completed", "counter", TEAM_TIER, "Jobs that completed.", "records"),
    MetricSpec("yoloq_jobs_failed", "counter", TEAM_TIER, "Jobs that failed or crashed.", "records"),
    MetricSpec("yoloq_jobs_cancelled", "counter", TEAM_TIER, "Jobs that were cancelled.", "records"),
    MetricSpec("yoloq_segments_ended", "counter", (*TEAM_TIER, "state"),
               "Segments that ended, by end state (Completed, Preempted, Failed, Crashed, Cancelled).",
               "records"),
    MetricSpec("yoloq_preemptions", "counter", TEAM_TIER,
               "Segments stopped for another job (labels: the victim's team and tier).", "records"),
    MetricSpec("yoloq_epochs_trained", "counter", TEAM_TIER,
               "Epochs trained by segments, running ones included (an epoch trained again after a "
               "crash counts again).", "records"),
    # histograms: every segment since the queue began
    MetricSpec("yoloq_queue_wait_seconds", "histogram", ("tier",),
               "Seconds from queued to started, per segment.", "records"),
    MetricSpec("yoloq_segment_duration_seconds", "histogram", ("tier",),
               "Seconds from started to ended, per segment that ended.", "records"),
    MetricSpec("yoloq_scheduler_decide_seconds", "histogram", (),
               "Seconds one policy decision took, since the leader took the lease (no samples "
               "while the leader publishes no histogram).", "scheduler"),
    MetricSpec("yoloq_scheduler_pass_seconds", "histogram", (),
               "Seconds one scheduling pass took, reads and writes included, since the leader took "
               "the lease (no samples while the leader publishes no histogram).", "scheduler"),
    # gauges: what holds now
    MetricSpec("yoloq_queue_length", "gauge", ("tier",), "Segments waiting for a GPU now.", "queue"),
    MetricSpec("yoloq_running_segments", "gauge", ("tier",), "Segments running (or starting) now.", "queue"),
    MetricSpec("yoloq_gpu_slots", "gauge", ("node", "gpu", "gpu_name"),
               "GPU slots a live node declares (1 per GPU).", "nodes"),
    MetricSpec("yoloq_gpu_busy", "gauge", ("node", "gpu"), "1 while a segment holds the GPU.", "nodes"),
    MetricSpec("yoloq_node_up", "gauge", ("node",), "1 while the node's heartbeat is fresh.", "nodes"),
    MetricSpec("yoloq_node_heartbeat_age_seconds", "gauge", ("node",),
               "Seconds since the node's last heartbeat.", "nodes"),
    MetricSpec("yoloq_scheduler_recent_decide_seconds", "gauge", ("quantile",),
               "Seconds one policy decision took: quantile (0.5, 0.95) over the leader's last "
               "passes (up to 2,000).", "scheduler"),
    MetricSpec("yoloq_scheduler_recent_pass_seconds", "gauge", ("quantile",),
               "Seconds one scheduling pass took: quantile (0.5, 0.95) over the leader's last "
               "passes (up to 2,000).", "scheduler"),
    MetricSpec("yoloq_scheduler_stats_age_seconds", "gauge", (),
               "Seconds since the leader last published its stats.", "scheduler"),
    MetricSpec("yoloq_team_usage_tu", "gauge", ("team", "period"),
               "Training Units the team spent in its current quota period.", "usage"),
    MetricSpec("yoloq_team_quota_tu", "gauge", ("team", "period"), "The team's quota per period.", "usage"),
    MetricSpec("yoloq_team_usage_7d_tu", "gauge", ("team",), "Training Units over the last 7 days.", "usage"),
    MetricSpec("yoloq_job_map50_95", "gauge", ("job", "team"),
               "Latest validation mAP50-95 of a job with a segment running or waiting.", "mlflow"),
    MetricSpec("yoloq_scrape_source_up", "gauge", ("source",),
               "1 when the source could be read in this scrape, 0 when it failed (see the API "
               "server's log).", "scrape"),
    MetricSpec("yoloq_scrape_source_seconds", "gauge", ("source",),
               "Seconds the source took in this scrape (keep the sum below the scrape timeout).", "scrape"),
)
BY_NAME = {spec.name: spec for spec in CATALOGUE}


def family(name: str) -> Metric:
    """An empty family for the catalogued metric `name`."""
    return BY_NAME[name].family()

"""The metrics reference page and the metric types, without a server: the checked-in page is
what the catalogue renders, every family the collector declares is catalogued with a
conventional name, and a histogram's buckets are cumulative."""

from __future__ import annotations

from collections import Counter

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from yoloq.api import metrics, metrics_doc
from yoloq.api.metrics_catalogue import CATALOGUE
from yoloq.api.metrics_totals import Totals
from yoloq.base.histogram import CumulativeHistogram


def test_the_checked_in_reference_page_is_current():
    assert metrics_doc.PAGE.read_text() == metrics_doc.render_markdown(), (
        f"docs/reference/metrics.md is stale: run `{metrics_doc.REGENERATE}`")


def test_every_declared_family_is_catalogued_once_with_a_conventional_name():
    declared = [f.name for f in metrics.YoloqCollector().describe()]
    assert len(declared) == len(set(declared)) == len(CATALOGUE)
    for spec in CATALOGUE:
        assert spec.name.startswith("yoloq_") and not spec.name.endswith("_total")
        assert not any(window in spec.name for window in ("_24h", "_1h")), spec.name  # windows are PromQL's


def test_a_histogram_counts_cumulatively_with_inf_last():
    h = CumulativeHistogram((1.0, 10.0, 100.0))
    for value in (0.5, 5.0, 5.0, 50.0, 500.0):
        h.observe(value)
    assert h.buckets() == [("1.0", 1), ("10.0", 3), ("100.0", 4), ("+Inf", 5)]
    assert h.sum == 560.5 and h.count == 5
    assert CumulativeHistogram.from_dict(h.to_dict()) == h
    with pytest.raises(ValueError):
        CumulativeHistogram.from_dict({"bounds": [1, 2], "counts": [1, 2]})


def test_the_exposition_types_counters_and_histograms_conventionally():
    """The families built from totals parse back as counter (`_total`) and histogram (`_bucket`
    with `le`, `_sum`, `_count`) in the text format Prometheus scrapes."""
    totals = Totals()
    totals.submitted[("vision", "low")] += 3
    totals.preemptions[("vision", "low")] += 1
    totals.waits.observe(("low",), 12.0)
    totals.waits.observe(("low",), 700.0)

    class Fixed:
        def collect(self):
            yield from metrics.totals_families(totals, live_epochs=Counter())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert families["yoloq_jobs_submitted"].type == "counter"
    assert [(s.name, s.value) for s in families["yoloq_jobs_submitted"].samples
            if s.name.endswith("_total")] == [("yoloq_jobs_submitted_total", 3.0)]
    assert families["yoloq_preemptions"].type == "counter"
    wait = families["yoloq_queue_wait_seconds"]
    assert wait.type == "histogram"
    buckets = [s for s in wait.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf" and counts[-1] == 2
    assert {s.name for s in wait.samples} >= {"yoloq_queue_wait_seconds_sum", "yoloq_queue_wait_seconds_count"}

"""`/metrics` scraped by a real Prometheus server (Debian's package, started here on loopback
with a generated config, 2 s scrape interval): while one job holds the session stack's only
slot (frozen inside its epoch) and a second waits, PromQL over Prometheus's HTTP API returns
a queue length of one and one busy slot out of one, and `increase()` over the submitted-jobs
counter sees the submissions. The same scrape parsed with prometheus_client's own parser has
conventional types: counters that grow with each submit, histograms with cumulative buckets;
and totals counted afresh from Prefect's records (as a restarted API server counts them) are
never below what the running server exported.

The scrape timeout is the interval (2 s), not 1 s: a scrape of the loaded 2-core CI host took
0.6-1.0 s on an idle stack, and every one over the timeout is dropped (`up` 0, no samples), which
is how this test once waited 300 s for a value Prometheus never stored. The CLI runs in this
process (no interpreter start per call), and the test first waits for the session stack's queue
to be idle, so another test file's jobs cannot be counted."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from contextlib import redirect_stderr, redirect_stdout
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stack_helpers import freeze, published_node, thaw, wait_final, wait_for, write_spec

from yoloq import cli
from yoloq.ops.stack import free_port

pytestmark = [pytest.mark.service, pytest.mark.training]


@pytest.fixture
def prometheus(yoloq_stack, tmp_path):
    """A Prometheus server scraping the stack's API server; yields its base URL."""
    binary = shutil.which("prometheus")
    assert binary, "the prometheus binary is missing: apt-get install -y prometheus (see .ci/run)"
    target = urlsplit(yoloq_stack.rest_url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 2s
  scrape_timeout: 2s  # a scrape slower than this (a loaded CI host) shows in scrape_health()
scrape_configs:
  - job_name: yoloq
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
""")
    port = free_port(1)
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "prometheus.log", "w") as log:
        proc = subprocess.Popen([binary, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: _ready(url), "Prometheus to be ready", timeout_s=60)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def query(url: str, promql: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}",
                                timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _value(url: str, promql: str) -> float | None:
    result = query(url, promql)
    return float(result[0]["value"][1]) if result else None


def scrape_health(url: str) -> str:
    """How Prometheus's scrapes of the API went over the last five minutes (for a failure)."""
    def value(promql: str) -> str:
        found = _value(url, promql)
        return "none" if found is None else f"{found:g}"

    return (f"scrapes {value('count_over_time(up[5m])')}, successful {value('sum_over_time(up[5m])')}, "
            f"slowest {value('max_over_time(scrape_duration_seconds[5m])')} s; "
            f"submitted-counter samples {value('sum(count_over_time(yoloq_jobs_submitted_total[5m]))')}")


def yoloq(*args: str) -> subprocess.CompletedProcess:
    """`yoloq ARGS` run in this process, as `stack_helpers.yoloq` runs it in a new one."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def scrape(yoloq_stack) -> dict:
    """The API server's `/metrics`, parsed: {family name: family}."""
    text = httpx.get(yoloq_stack.rest_url + "/metrics", timeout=120).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def total(families: dict, name: str, **labels: str) -> float:
    """Sum of a counter's `_total` samples (those matching `labels`)."""
    return sum(s.value for s in families[name].samples if s.name == f"{name}_total"
               and all(s.labels.get(k) == v for k, v in labels.items()))


def assert_conventional(families: dict) -> None:
    kinds = {name: family.type for name, family in families.items()}
    for counter in ("yoloq_jobs_submitted", "yoloq_preemptions", "yoloq_epochs_trained",
                    "yoloq_jobs_completed", "yoloq_jobs_failed", "yoloq_jobs_cancelled"):
        assert kinds[counter] == "counter", (counter, kinds[counter])
    for histogram in ("yoloq_queue_wait_seconds", "yoloq_segment_duration_seconds"):
        assert kinds[histogram] == "histogram"
    for gauge in ("yoloq_queue_length", "yoloq_gpu_busy", "yoloq_gpu_slots", "yoloq_running_segments"):
        assert kinds[gauge] == "gauge"
    assert not [n for n in kinds if n.endswith("_24h")]  # windows are Prometheus's to take
    wait = families["yoloq_queue_wait_seconds"]
    for tier in {s.labels["tier"] for s in wait.samples}:
        buckets = [s for s in wait.samples if s.name.endswith("_bucket") and s.labels["tier"] == tier]
        values = [s.value for s in buckets]
        assert values == sorted(values) and buckets[-1].labels["le"] == "+Inf", (tier, values)
        count = next(s.value for s in wait.samples if s.name.endswith("_count") and s.labels["tier"] == tier)
        assert values[-1] == count


def _fresh_totals() -> dict[str, float]:
    """Totals counted from nothing, as an API server that just started counts them."""
    from prefect.client.orchestration import get_client

    from yoloq.api import metrics
    from yoloq.api.metrics_reads import read_jobs, read_segments
    from yoloq.api.metrics_totals import RecordTotals

    counter = RecordTotals(read_segments, read_jobs, metrics.was_preempted)
    with get_client(sync_client=True) as client:
        live = counter.refresh(client, metrics.open_pool_runs(client), time.time())
    totals = counter.totals
    return {"yoloq_jobs_submitted": sum(totals.submitted.values()),
            "yoloq_preemptions": sum(totals.preemptions.values()),
            "yoloq_epochs_trained": sum(totals.epochs.values()) + sum(live.values()),
            "yoloq_segments_ended": sum(totals.segments_ended.values())}


def _submit(spec) -> str:
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def _queue() -> list[dict]:
    from prefect.client.orchestration import get_client

    from yoloq.views.queueview import queue_rows

    with get_client(sync_client=True) as client:
        return queue_rows(client)


def _cancel_leftovers() -> None:
    """Cancel what earlier test files on this stack left queued or running: the test counts
    the whole queue and the one slot. (Waiting for them to finish cost up to 300 s in CI.)"""
    leftovers = {row["job"] for row in _queue()}
    for job in leftovers:
        yoloq("cancel", job, "--reason", "the metrics test needs an idle queue")
    wait_for(lambda: not _queue(), f"the queue to empty after cancelling {sorted(leftovers)}", 300)


def _training(job_id: str):
    from prefect.client.orchestration import get_client

    from work_pools.processes import recorded_pid
    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        running = [s for s in segments_of(client, job_id) if s.state and s.state.is_running()]
    return running[0].id if running and recorded_pid(running[0].id) is not None else None


def test_prometheus_scrapes_queue_length_and_busy_slots(yoloq_stack, prometheus, tiny_dataset, tmp_path):
    _cancel_leftovers()
    # Prometheus's first scrape of a new target comes seconds after it is ready (its scrape
    # manager applies target updates every 5 s): a job submitted before it is already in the
    # first sample, and increase() over the counter never moves (this failed twice in CI)
    wait_for(lambda: _value(prometheus, 'up{job="yoloq"}') == 1,
             "Prometheus's first scrape of the API server", timeout_s=60)
    tag = uuid.uuid4().hex[:4]
    before = scrape(yoloq_stack)
    assert_conventional(before)
    first = _submit(write_spec(tmp_path / "a.yaml", tiny_dataset, name=f"prom-a-{tag}", epochs=1))
    pid = freeze(wait_for(lambda: _training(first), f"{first} training", timeout_s=600))
    second = None
    try:
        # a live node of another pool on the same server is not this pool's capacity
        with published_node(f"other-{tag}", "NVIDIA A100-SXM4-80GB", 80.0, f"other-pool-{tag}"):
            second = _submit(write_spec(tmp_path / "b.yaml", tiny_dataset, name=f"prom-b-{tag}", epochs=1))
            wait_for(lambda: [r for r in _queue() if r["job"] == second and r["state"] == "waiting"],
                     f"{second}'s segment to wait", timeout_s=300)
            wait_for(lambda: _value(prometheus, 'yoloq_queue_length{tier="normal"}') == 1,
                     "Prometheus to see one waiting segment", timeout_s=60)
            assert _value(prometheus, "sum(yoloq_queue_length)") == 1
            assert _value(prometheus, "sum(yoloq_gpu_slots)") == 1  # the stack's pool declares one slot
            assert _value(prometheus, "sum(yoloq_node_up)") == 1
            assert _value(prometheus, "sum(yoloq_gpu_busy)") == 1
            assert _value(prometheus, "min(yoloq_scrape_source_up)") == 1  # every source was read
            assert _value(prometheus, 'sum(yoloq_running_segments{tier="normal"})') == 1
            assert query(prometheus, "yoloq_queue_wait_seconds_count")  # histograms exported
            assert _value(prometheus, 'count(yoloq_scrape_source_seconds)') == 6  # one per source
            # increase() needs successful scrapes on both sides of a submit (a scrape that times
            # out gives no sample)
            try:
                wait_for(lambda: (_value(prometheus, "sum(increase(yoloq_jobs_submitted_total[5m]))")
                                  or 0) >= 1, "increase() over the submitted-jobs counter", timeout_s=120)
            except AssertionError as timed_out:
                raise AssertionError(f"{timed_out} ({scrape_health(prometheus)})") from None
            after = scrape(yoloq_stack)
            assert_conventional(after)
            assert total(after, "yoloq_jobs_submitted") == total(before, "yoloq_jobs_submitted") + 2
            assert total(after, "yoloq_jobs_submitted", team="vision", tier="normal") >= 2
            for name in ("yoloq_preemptions", "yoloq_epochs_trained", "yoloq_segments_ended"):
                assert total(after, name) >= total(before, name), name  # counters never go down
            fresh = _fresh_totals()
            for name, value in fresh.items():
                assert value >= total(after, name), (name, value, total(after, name))
    finally:
        thaw(pid)
        for job in filter(None, (first, second)):
            yoloq("cancel", job, "--reason", "metrics test done")
        for job in filter(None, (first, second)):
            wait_final(job, timeout_s=600, cli=yoloq)

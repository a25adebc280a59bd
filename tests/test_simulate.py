"""The trace-replay simulator: formats, generator, guarantees, and policy comparison."""

from __future__ import annotations

import json
import math

import pytest

from work_pools.policy import fifo, priority, starvation_bound_s, yoloq
from work_pools.simulate import (REFERENCE_CLUSTER, TraceJob, generate, parse_cluster, read_trace,
                                 simulate, summarise, write_trace)
from yoloq.cli import main
from yoloq.base.errors import UserError
from yoloq.domain.tiers import Tier

REQUIRED_KEYS = {"avg_jct_s", "p50_jct_s", "p99_jct_s", "wait_p50_s_by_tier", "wait_p99_s_by_tier",
                 "max_rho", "p95_rho", "jain", "utilization", "preemptions_per_job", "redone_gpu_s",
                 "eta_mape", "eta_coverage_80"}


def job(job_id, submit, duration, tier=Tier.NORMAL, team="t", klass="", gpus=1, mem=8.0, epochs=10):
    return TraceJob(job_id, team, tier, submit, gpus, mem, duration, epochs, "yolov8n", klass)


# -- formats -------------------------------------------------------------------------------

def test_yoloq_csv_round_trip(tmp_path):
    jobs = generate(50, "light", seed=3)
    write_trace(tmp_path / "t.csv", jobs)
    assert read_trace(tmp_path / "t.csv") == [
        TraceJob(j.job_id, j.team, j.tier, round(j.submit_time, 1), j.gpus, round(j.gpu_mem_gb, 1),
                 round(j.duration_s, 1), j.epochs, j.model, j.klass) for j in jobs]


def test_tiresias_csv_is_read(tmp_path):
    path = tmp_path / "tiresias.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    "7,4,100,25000,resnet50,3600,10\n3,1,0,500,unknownnet,60,5\n")
    first, second = read_trace(path)
    assert (first.job_id, first.gpus, first.gpu_mem_gb, first.epochs) == ("3", 1, 8.0, 1)
    assert (second.job_id, second.gpus, second.gpu_mem_gb, second.epochs) == ("7", 4, 12.0, 25)
    assert second.tier == Tier.NORMAL and second.team == "default"


@pytest.mark.parametrize("spec, count, first", [
    pytest.param("8xA100-80GB,4xV100-32GB", 12, "A100-80GB", id="shorthand"),
    pytest.param("2 x NVIDIA H100 80GB HBM3", 2, "H100-80GB", id="nvml-style-name"),
])
def test_cluster_shorthand(spec, count, first):
    gpus = parse_cluster(spec)
    assert len(gpus) == count and gpus[0].name == first
    assert [g.index for g in gpus] == list(range(count))


def test_cluster_file_and_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("gpus:\n  - {type: L4-24GB, count: 3}\n")
    assert [g.name for g in parse_cluster(str(path))] == ["L4-24GB"] * 3
    with pytest.raises(UserError, match="unknown GPU type"):
        parse_cluster("2xB999")


def test_generator_is_philly_like_and_reproducible():
    jobs = generate(2000, "overloaded", seed=1)
    assert jobs == generate(2000, "overloaded", seed=1)
    single = sum(j.gpus == 1 for j in jobs) / len(jobs)
    durations = sorted(j.duration_s for j in jobs)
    median, p99 = durations[len(jobs) // 2], durations[int(len(jobs) * 0.99)]
    assert 0.75 < single < 0.85
    assert 1200 < median < 2700 and p99 > 20 * median  # heavy tail
    assert all(a.submit_time <= b.submit_time for a, b in zip(jobs, jobs[1:]))


# -- guarantees ----------------------------------------------------------------------------

def _sustained_load(tier, hours=12):
    """One GPU, jobs of `tier` arriving faster than it can serve them, and one low job."""
    trace = [job(f"h{i:03d}", i * 1000.0, 1200, tier) for i in range(hours * 36 // 10)]
    return trace + [job("low", 30.0, 1800, Tier.LOW, team="other")]


def _low_start(tier, policy):
    result = simulate(_sustained_load(tier), parse_cluster("1xV100-32GB"), policy, eta=False)
    return next(j for j in result.jobs if j.id == "low").first_start


@pytest.mark.parametrize("tier, policy", [
    pytest.param(Tier.HIGH, yoloq(), id="default-ceiling-under-high-load"),
    pytest.param(Tier.URGENT, yoloq(max_aging_tiers=3, aging_ceiling=Tier.URGENT),
                 id="urgent-ceiling-under-urgent-load"),
])
def test_no_starvation_beyond_the_documented_bound(tier, policy):
    bound = starvation_bound_s(policy) + 600  # + one segment: it takes the next boundary
    assert _low_start(tier, policy) <= bound
    assert _low_start(tier, priority()) > 10 * 3600  # strict tiers: it waits for the load to end


def test_seventy_percent_rule_lets_short_experiments_through():
    trace = [job("full", 0.0, 10 * 3600, klass="full", epochs=100)]
    trace += [job(f"s{i}", 3 * 3600 + i * 3600.0 + 30, 300, klass="short") for i in range(4)]
    gpus = parse_cluster("1xV100-32GB")
    with_rule = {j.id: j for j in simulate(trace, gpus, yoloq(), eta=False).jobs}
    # SRPT, or 5-minute aging, alone would also let them in: compare with both off
    rule_off = yoloq(long_job_share=0.0, within_rank="submit", aging_step_s=3600)
    without = {j.id: j for j in simulate(trace, gpus, rule_off, eta=False).jobs}
    for i in range(4):
        s = with_rule[f"s{i}"]
        assert s.first_start - s.spec.submit_time <= 600  # the next segment boundary
        late = without[f"s{i}"]
        assert late.first_start - late.spec.submit_time >= 3600  # only aging gets it in
    assert with_rule["full"].finish == pytest.approx(10 * 3600 + 4 * 300, abs=4 * 600)
    assert with_rule["full"].preemptions == 0  # it yielded at boundaries, lost nothing


@pytest.fixture(scope="module")
def overloaded_results():
    trace = generate(300, "overloaded", seed=0)
    gpus = parse_cluster(REFERENCE_CLUSTER)
    return {name: summarise(simulate(trace, gpus, policy, eta=name == "yoloq"))
            for name, policy in (("fifo", fifo()), ("priority", priority()), ("yoloq", yoloq()))}


def test_yoloq_beats_the_baselines_where_it_should(overloaded_results):
    fifo_run, prio, ours = (overloaded_results[n] for n in ("fifo", "priority", "yoloq"))
    assert ours["finished"] == ours["jobs"] == 300
    assert ours["avg_jct_s"] < fifo_run["avg_jct_s"]
    assert ours["wait_p99_s_by_tier"]["urgent"] < fifo_run["wait_p99_s_by_tier"]["urgent"]
    assert ours["max_rho"] < prio["max_rho"]


def test_summary_has_every_metric(overloaded_results):
    summary = overloaded_results["yoloq"]
    assert REQUIRED_KEYS <= summary.keys()
    assert 0 < summary["utilization"] <= 1 and 0 < summary["jain"] <= 1
    assert 0 <= summary["eta_coverage_80"] <= 1 and math.isfinite(summary["eta_mape"])


# -- the command -----------------------------------------------------------------------------

def test_cli_generate_then_simulate_json(tmp_path, capsys):
    out = tmp_path / "trace.csv"
    assert main(["simulate", "--generate", str(out), "--jobs", "60", "--load", "light",
                 "--seed", "2"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(out), "--cluster", "4xA100-80GB,4xV100-32GB", "--policy", "las",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert REQUIRED_KEYS <= summary.keys() and summary["finished"] == 60
    assert main(["simulate", str(out), "--cluster", "8xA100-80GB"]) == 0
    assert "JCT avg / p50 / p99" in capsys.readouterr().out


def test_cli_reports_user_errors_in_one_line(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "missing.csv")]) == 2
    assert "trace: file not found" in capsys.readouterr().err

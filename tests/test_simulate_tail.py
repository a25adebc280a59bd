"""Issue 26's figures in the simulator: per-team finish-time fairness, the per-hour
utilisation curve, and the tail the critical-path rule removes."""

from __future__ import annotations

import pytest

from work_pools.policy import yoloq
from work_pools.simulate import TraceJob, parse_cluster, simulate, summarise
from yoloq.domain.tiers import Tier

HOUR = 3600.0


def job(job_id, submit, duration, team="t", gpus=1):
    return TraceJob(job_id, team, Tier.NORMAL, submit, gpus, 8.0, duration,
                    max(1, round(duration / 300)), "yolov8n", "")


def test_team_ftf_is_each_teams_jct_over_its_equal_share_jct():
    """Two teams, one V100 each job's length: a alone first (rho 1), b waits behind it."""
    trace = [job("a1", 0.0, HOUR, team="a"), job("b1", 1.0, HOUR, team="b")]
    summary = summarise(simulate(trace, parse_cluster("1xV100-32GB"), yoloq(), eta=False))
    ftf = summary["team_ftf"]
    assert set(ftf) == {"a", "b"}
    assert ftf["b"] > ftf["a"] and summary["team_ftf_max"] == ftf["b"]
    assert summary["team_ftf_p95"] >= 1.0


def test_busy_by_hour_adds_up_to_the_busy_gpu_time():
    trace = [job(f"j{i}", i * 600.0, 2.5 * HOUR) for i in range(3)]
    result = simulate(trace, parse_cluster("2xV100-32GB"), yoloq(), eta=False)
    assert sum(result.busy_by_hour) == pytest.approx(result.busy_gpu_s)
    assert max(result.busy_by_hour) <= 2 * HOUR + 1e-6  # never more than every GPU busy
    assert result.busy_by_hour[0] > 0


def _long_and_short(share: float):
    trace = [job(f"s{i}", 0.0, HOUR) for i in range(10)] + [job("long", 1.0, 40 * HOUR)]
    result = simulate(trace, parse_cluster("2xV100-32GB"), yoloq(critical_path_share=share),
                      eta=False)
    return next(j for j in result.jobs if j.id == "long"), summarise(result)["makespan_s"]


def test_a_long_job_overlaps_the_short_ones():
    """Two GPUs, ten 1 h jobs and one 40 h job submitted together. The long job is the
    critical path (40 h against a backlog of 25 h): with the rule it starts at the first
    segment boundary and runs beside the short ones; without it, it follows them."""
    (long_on, makespan_on), (long_off, makespan_off) = _long_and_short(1.5), _long_and_short(0.0)
    assert long_on.first_start < HOUR < 4 * HOUR < long_off.first_start
    assert makespan_on < makespan_off - 1.5 * HOUR

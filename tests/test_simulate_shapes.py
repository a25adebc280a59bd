"""Trace shapes, honest metrics, calibrated ETAs, work conservation and soft preemption in
the simulator (issue 13 items 1, 3, 4, 6, 7)."""

from __future__ import annotations

import pytest

from work_pools.policy import fifo, las, priority, yoloq
from work_pools.policy.baselines import yoloq_soft
from work_pools.simulate import (REFERENCE_CLUSTER, SHAPES, TraceJob, make_trace, parse_cluster,
                                 simulate, summarise)
from work_pools.simulate.metrics import themis_rho
from yoloq.domain.tiers import Tier

NEW_KEYS = {"themis_max_rho", "themis_p95_rho", "max_slowdown", "p95_slowdown",
            "eta_raw_mape", "eta_raw_coverage_80", "idle_while_waiting_gpu_s", "throttles"}


def job(job_id, submit, duration, tier=Tier.NORMAL, team="t", gpus=1, mem=8.0, epochs=10):
    return TraceJob(job_id, team, tier, submit, gpus, mem, duration, epochs, "yolov8n")


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_is_reproducible_with_unique_ids(shape):
    trace = make_trace(shape, 120, seed=4)
    assert trace == make_trace(shape, 120, seed=4)
    assert len({j.job_id for j in trace}) == len(trace)
    assert all(a.submit_time <= b.submit_time for a, b in zip(trace, trace[1:]))


def test_shapes_have_their_character():
    flood = make_trace("flood", 1000, seed=1)
    assert 0.65 < sum(j.team == "flood" for j in flood) / len(flood) < 0.75
    bursts = make_trace("urgent-bursts", 400, seed=1)
    base = make_trace("overloaded", 400, seed=1)
    assert sum(j.tier == Tier.URGENT for j in bursts) >= sum(j.tier == Tier.URGENT for j in base) + 8
    with pytest.raises(ValueError, match="shape"):
        make_trace("nope", 10)


def test_themis_rho_is_one_for_a_job_alone_and_grows_with_contention():
    alone = simulate([job("a", 0.0, 3600)], parse_cluster("1xV100-32GB"), fifo(), eta=False)
    assert themis_rho(alone) == [pytest.approx(1.0)]
    # two equal jobs on one GPU, run back to back: N = 2 for the first half of the life of
    # the second job and 1 after; the first job finishes at 3600 with N = 2 -> rho 0.5
    two = simulate([job("a", 0.0, 3600), job("b", 0.0, 3600)], parse_cluster("1xV100-32GB"),
                   fifo(), eta=False)
    rhos = dict(zip(("a", "b"), themis_rho(two)))
    assert rhos["a"] == pytest.approx(0.5) and rhos["b"] == pytest.approx(7200 / (3600 * 1.5))


@pytest.fixture(scope="module")
def overloaded():
    trace = make_trace("overloaded", 300, seed=0)
    gpus = parse_cluster(REFERENCE_CLUSTER)
    no_reservations = yoloq(name="yoloq-no-reservations", backfill_reservations=False)
    return {p.name: summarise(simulate(trace, gpus, p, eta=p is not no_reservations))
            for p in (fifo(), priority(), las(), yoloq(), no_reservations)}


def test_new_keys_and_old_keys_keep_their_meaning(overloaded):
    ours = overloaded["yoloq"]
    assert NEW_KEYS <= ours.keys()
    assert ours["max_rho"] == ours["themis_max_rho"] and ours["p95_rho"] == ours["themis_p95_rho"]
    assert ours["max_slowdown"] >= ours["p95_slowdown"] >= 1.0


def test_yoloq_is_work_conserving_but_for_gang_reservations(overloaded):
    """Only GPUs reserved for a waiting gang stand free while a job would fit: none without
    reservations, and little with them (under a GPU-hour on 300 jobs)."""
    assert overloaded["yoloq-no-reservations"]["idle_while_waiting_gpu_s"] == 0.0
    assert 0.0 <= overloaded["yoloq"]["idle_while_waiting_gpu_s"] < 3600.0


def test_calibrated_eta_covers_better_than_the_raw_forward_run(overloaded):
    ours = overloaded["yoloq"]
    assert abs(ours["eta_coverage_80"] - 0.8) < abs(ours["eta_raw_coverage_80"] - 0.8)


def test_srpt_yoloq_beats_las_on_average_jct_and_keeps_urgent_fast(overloaded):
    ours, best = overloaded["yoloq"], overloaded["las"]
    assert ours["avg_jct_s"] < best["avg_jct_s"]
    assert ours["wait_p99_s_by_tier"]["urgent"] <= 300
    assert ours["themis_max_rho"] < min(overloaded["fifo"]["themis_max_rho"],
                                        overloaded["priority"]["themis_max_rho"])


def test_soft_preemption_throttles_instead_of_evicting():
    """A low job fills the only GPU; an urgent job arrives mid-epoch. Hard preemption evicts
    (the low job redoes part of an epoch); soft preemption shares the GPU from the low job's
    next epoch boundary: nothing is redone and the low job keeps running."""
    trace = [job("low", 0.0, 6000, Tier.LOW, mem=20.0, epochs=20),
             job("urgent", 1000.0, 900, Tier.URGENT, team="oncall", mem=20.0, epochs=3)]
    gpus = parse_cluster("1xV100-32GB")  # speed 1.0: the low job's epochs end every 300 s
    hard = {j.id: j for j in simulate(trace, gpus, yoloq(), eta=False, segment_s=3600).jobs}
    soft_run = simulate(trace, gpus, yoloq_soft(), eta=False, segment_s=3600)
    soft = {j.id: j for j in soft_run.jobs}
    assert hard["low"].preemptions == 1 and hard["low"].redone_gpu_s > 0
    assert soft_run.throttles == 1 and soft["low"].preemptions == 0
    assert soft["low"].redone_gpu_s == 0 and soft["low"].throttled == 1
    assert soft["urgent"].first_start == pytest.approx(1200.0)  # the low job's next epoch end
    assert all(j.finish is not None for j in soft.values())


def test_a_task_mix_keeps_arrivals_and_scales_each_job_by_its_task():
    from work_pools.simulate.generate import generate, mix_tasks
    from yoloq.domain.tasks import TASKS

    plain = generate(400, "overloaded", seed=3)
    mixed = mix_tasks(plain, {"detect": 2, "segment": 1, "classify": 1}, seed=3)
    assert [j.submit_time for j in mixed] == [j.submit_time for j in plain]
    assert [j.gpus for j in mixed] == [j.gpus for j in plain]
    counts = {"detect": 0, "segment": 0, "classify": 0}
    for before, after in zip(plain, mixed):
        task = {"": "detect", "seg": "segment", "cls": "classify"}[after.model.partition("-")[2]]
        counts[task] += 1
        row = TASKS[task]
        assert after.gpu_mem_gb == round(before.gpu_mem_gb * row.mem_factor, 1)
        assert after.duration_s == round(before.duration_s * row.time_factor, 1)
    assert 150 <= counts["detect"] <= 250 and 70 <= counts["segment"] <= 130 and 70 <= counts["classify"] <= 130
    assert mix_tasks(plain, {"detect": 1}, seed=3) == plain, "detection only is the plain trace"


@pytest.mark.parametrize("tasks, expect", [
    pytest.param("panoptic=1", "--tasks: unknown task 'panoptic'", id="unknown"),
    pytest.param("detect=0", "--tasks: cannot read 'detect=0'", id="zero"),
    pytest.param("detect=lots", "--tasks: cannot read 'detect=lots'", id="not-a-number"),
])
def test_a_bad_task_mix_is_one_line(tmp_path, capsys, tasks, expect):
    from yoloq.cli import main

    assert main(["simulate", "--generate", str(tmp_path / "t.csv"), "--jobs", "5", "--tasks", tasks]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0] and not (tmp_path / "t.csv").exists()

"""The critical-path rule (issue 26, no tail): a job whose own remaining time is at least
`critical_path_share` of the pool's backlog goes ahead of its bucket and takes the fastest
GPUs that fit, so long and gang jobs overlap the short ones instead of following them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from work_pools.policy import Policy, Snapshot, decide
from work_pools.policy.baselines import yoloq
from builders import make_gpus, make_job
from work_pools.policy.ordering import build_context, critical_path

NOW = 100_000.0
HOUR = 3600.0


def job(job_id: str, hours: float, gpus: int = 1, mem: float = 8.0, tier: str = "normal"):
    return (make_job(job_id).tier(tier).mem(mem).gpus(gpus).remaining(hours * HOUR)
            .submitted(NOW - 60).obj())


def snap(gpus_spec: str, waiting, running=()) -> Snapshot:
    return Snapshot(make_gpus(gpus_spec), tuple(running), tuple(waiting))


def test_the_default_policy_is_what_the_simulator_calls_yoloq():
    assert replace(yoloq(), name="x") == replace(Policy(), name="x")
    assert Policy().critical_path_share > 0


@pytest.mark.parametrize("share, hours, expect", [
    pytest.param(1.5, (30.0, 1.0, 1.0, 1.0), [True, False, False, False], id="long-job-is-critical"),
    pytest.param(1.5, (2.0, 1.0, 1.0, 1.0), [False, False, False, False], id="none-longer-than-backlog"),
    pytest.param(0.0, (30.0, 1.0, 1.0, 1.0), [False, False, False, False], id="rule-off"),
    pytest.param(1.5, (1.0,), [True], id="alone-in-the-queue"),
])
def test_critical_path_mask(share, hours, expect):
    waiting = [job(f"j{i}", h) for i, h in enumerate(hours)]
    ctx = build_context(snap("2xV100-32GB", waiting), Policy(critical_path_share=share), NOW)
    assert critical_path(ctx).tolist() == expect


@pytest.mark.parametrize("share, first", [
    pytest.param(1.5, ["long", "s0"], id="critical-goes-ahead-of-shorter-work"),
    pytest.param(0.0, ["s0", "s1"], id="without-the-rule-shortest-first"),
])
def test_a_critical_job_goes_first_in_its_bucket(share, first):
    """Backlog 41.8 GPU-h on 2 GPUs = 20.9 h; the 40 h job is over 1.5 x that."""
    waiting = [job("long", 40.0)] + [job(f"s{i}", 0.5 + i * 0.1) for i in range(3)]
    decision = decide(snap("2xV100-32GB", waiting), Policy(critical_path_share=share), NOW)
    assert [a.job_id for a in decision.admit] == first


@pytest.mark.parametrize("share, gpu", [
    pytest.param(1.5, 1, id="critical-takes-the-fastest-gpu"),
    pytest.param(0.0, 0, id="otherwise-best-fit-keeps-the-big-gpu"),
])
def test_a_critical_job_is_placed_on_the_fastest_gpu(share, gpu):
    """V100-32GB is the best fit for 8 GB; the A100 is faster."""
    decision = decide(snap("1xV100-32GB,1xA100-80GB", [job("long", 40.0)]),
                      Policy(critical_path_share=share), NOW)
    assert [a.gpu_indices for a in decision.admit] == [(gpu,)]


def test_tiers_still_come_first():
    """The rule orders within a bucket: an urgent short job still goes before a normal long one."""
    waiting = [job("long", 40.0), job("urgent", 0.2, tier="urgent")]
    decision = decide(snap("1xV100-32GB", waiting), Policy(), NOW)
    assert [a.job_id for a in decision.admit] == ["urgent"]


def test_a_critical_gang_gets_the_fastest_node():
    gpus = tuple(replace(g, node=node) for node, spec in (("slow", "2xV100-32GB"), ("fast", "2xA100-80GB"))
                 for g in make_gpus(spec))
    decision = decide(Snapshot(gpus, (), (job("gang", 40.0, gpus=2),)), Policy(), NOW)
    (admission,) = decision.admit
    assert admission.node == "fast" and admission.gpu_indices == (0, 1)


# -- backfill with reservations ---------------------------------------------------------------

def _busy(job_id: str, index: int, *, started: float, hours_left: float = 10.0):
    return (make_job(job_id).tier("normal").mem(8.0).remaining(hours_left * HOUR)
            .running_on(index, started=started).obj())


def _gang_waits(extra, reservations: bool = True):
    """4 GPUs: GPUs 0-1 busy until their segment boundary (600 s segments started 400 s ago:
    200 s left), GPU 3 for 500 s more, GPU 2 free; a critical 2-GPU gang at the front (100 h
    on 2 GPUs, the backlog about 59 h), then `extra` single jobs. The gang will start on GPUs
    0 and 2 (or 1 and 2) in 200 s: GPU 2 is reserved for it."""
    running = [_busy("r0", 0, started=NOW - 400), _busy("r1", 1, started=NOW - 400),
               _busy("r3", 3, started=NOW - 100)]
    gpus = make_gpus("4xV100-32GB", {0: 8.0, 1: 8.0, 3: 8.0})
    waiting = [job("gang", 100.0, gpus=2), *extra]
    policy = Policy(backfill_reservations=reservations)
    return decide(Snapshot(gpus, tuple(running), tuple(waiting)), policy, NOW)


@pytest.mark.parametrize("extra, reservations, admitted", [
    pytest.param([job("later", 5.0)], True, [], id="reserved-gpus-kept-from-a-longer-job"),
    pytest.param([job("quick", 100 / HOUR)], True, [("quick", (2,))],
                 id="backfill-a-job-that-ends-before-the-gang-starts"),
    pytest.param([job("later", 5.0)], False, [("later", (2,))], id="without-reservations-it-takes-them"),
    pytest.param([job("later", 5.0, tier="urgent")], True, [("later", (2,))],
                 id="a-higher-tier-comes-before-the-gang"),
])
def test_a_waiting_gang_reserves_the_gpus_it_will_start_on(extra, reservations, admitted):
    decision = _gang_waits(extra, reservations)
    assert [(a.job_id, a.gpu_indices) for a in decision.admit] == admitted
    if reservations and not admitted:
        assert "reserved for it, all free in about 3 min" in decision.waiting["gang/s1"]

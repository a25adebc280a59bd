"""The node dimension of the pure policy (issue 8): a GPU is (node, index), a segment runs
on one node, free GPUs anywhere come before preemption, victims are the cheapest pool-wide."""

from __future__ import annotations

from dataclasses import replace

import pytest

from work_pools.policy import Gpu, Policy, Snapshot, decide
from builders import make_gpus, make_job
from yoloq.domain.tiers import Tier

NOW = 100_000.0
POLICY = Policy(min_runtime_s=300, aging_step_s=3600, urgent_overrides_min_runtime=False)


def nodes(**spec: str) -> tuple[Gpu, ...]:
    """nodes(a="2xA100-80GB", b="1xV100-32GB"): indices restart at 0 on each node."""
    return tuple(replace(g, node=name) for name, s in spec.items() for g in make_gpus(s))


def run_on(job_id: str, node: str, *indices: int, tier="low", mem=8.0, ckpt=NOW - 60):
    seg = (make_job(job_id).tier(tier).mem(mem)
           .running_on(*indices, started=NOW - 1000, checkpoint=ckpt).obj())
    return replace(seg, node=node)


def wait(job_id: str, tier="normal", gpus=1, mem=8.0):
    return make_job(job_id).tier(tier).mem(mem).gpus(gpus).submitted(NOW - 10).obj()


def snapshot(gpus, running=(), waiting=()) -> Snapshot:
    used: dict[tuple[str, int], float] = {}
    for seg in running:
        for i in seg.gpu_indices:
            used[(seg.node, i)] = used.get((seg.node, i), 0.0) + seg.est_mem_gb
    gpus = tuple(replace(g, mem_free_gb=g.mem_total_gb - used.get(g.key, 0.0)) for g in gpus)
    return Snapshot(gpus, tuple(running), tuple(waiting))


def test_existing_callers_see_one_local_node():
    decision = decide(snapshot(make_gpus("2xV100-32GB"), waiting=[wait("j")]), POLICY, NOW)
    (admission,) = decision.admit
    assert admission.node == "local" and admission.gpu_indices == (0,)
    assert "on local" not in admission.reason


@pytest.mark.parametrize("gpus, expect_node, expect_indices", [
    pytest.param(2, "a", (0, 1), id="gang-on-the-node-that-has-enough"),
    pytest.param(3, "a", (0, 1, 2), id="gang-takes-a-whole-node"),
    pytest.param(4, None, None, id="gang-never-spans-nodes"),
])
def test_gang_gets_gpus_on_one_node(gpus, expect_node, expect_indices):
    pool = nodes(a="3xA100-80GB", b="1xA100-80GB")
    decision = decide(snapshot(pool, waiting=[wait("g", gpus=gpus)]), POLICY, NOW)
    if expect_node is None:
        assert not decision.admit
        assert "on one node" in decision.waiting["g/s1"]
    else:
        (admission,) = decision.admit
        assert (admission.node, admission.gpu_indices) == (expect_node, expect_indices)


def test_gang_skips_a_node_with_too_few_free_gpus():
    pool = nodes(a="2xA100-80GB", b="2xA100-80GB")
    busy = run_on("r", "a", 0, tier="urgent")
    decision = decide(snapshot(pool, [busy], [wait("g", gpus=2)]), POLICY, NOW)
    (admission,) = decision.admit
    assert (admission.node, admission.gpu_indices) == ("b", (0, 1))
    assert "on b" in admission.reason


def test_issue_8_scenario_preempts_only_the_low_job():
    """low on A, normal on B, one slot each; an urgent job preempts the low one, nobody else."""
    pool = nodes(A="1xV100-32GB", B="1xV100-32GB")
    running = [run_on("low", "A", 0, tier="low"), run_on("normal", "B", 0, tier="normal")]
    decision = decide(snapshot(pool, running, [wait("urgent", tier="urgent")]), POLICY, NOW)
    assert [p.job_id for p in decision.preempt] == ["low"]
    assert "GPU 0 on A frees when job low stops" in decision.waiting["urgent/s1"]


def test_a_free_gpu_anywhere_comes_before_preemption():
    pool = nodes(A="1xV100-32GB", B="1xV100-32GB", C="1xV100-32GB")
    running = [run_on("low", "A", 0, tier="low"), run_on("normal", "B", 0, tier="normal")]
    decision = decide(snapshot(pool, running, [wait("urgent", tier="urgent")]), POLICY, NOW)
    assert not decision.preempt
    (admission,) = decision.admit
    assert (admission.node, admission.gpu_indices) == ("C", (0,))


@pytest.mark.parametrize("victims, expected", [
    pytest.param([("x", "A", "normal", NOW - 60), ("y", "B", "low", NOW - 500)], "y",
                 id="lower-tier-first-whatever-the-work-lost"),
    pytest.param([("x", "A", "low", NOW - 500), ("y", "B", "low", NOW - 30)], "y",
                 id="then-least-work-lost"),
    pytest.param([("x", "A", "low", NOW - 30), ("y", "B", "low", NOW - 500)], "x",
                 id="least-work-lost-on-any-node"),
])
def test_cheapest_victim_across_the_pool(victims, expected):
    pool = nodes(A="1xV100-32GB", B="1xV100-32GB")
    running = [run_on(j, n, 0, tier=t, ckpt=c) for j, n, t, c in victims]
    decision = decide(snapshot(pool, running, [wait("u", tier="urgent")]), POLICY, NOW)
    assert [p.job_id for p in decision.preempt] == [expected]


def test_gang_preemption_stays_on_one_node_and_uses_its_free_gpu():
    """a: one free GPU + a low job; b: two low jobs with older checkpoints. A 2-GPU urgent
    job needs only the low job on a (one victim), not two on b."""
    pool = nodes(a="2xA100-80GB", b="2xA100-80GB")
    running = [run_on("la", "a", 1, ckpt=NOW - 10), run_on("lb0", "b", 0, ckpt=NOW - 5),
               run_on("lb1", "b", 1, ckpt=NOW - 5)]
    decision = decide(snapshot(pool, running, [wait("u", tier="urgent", gpus=2)]), POLICY, NOW)
    assert [p.job_id for p in decision.preempt] == ["la"]
    assert "GPU 0, 1 on a" in decision.waiting["u/s1"]


def test_same_index_on_two_nodes_are_different_gpus():
    pool = nodes(a="1xV100-32GB", b="1xV100-32GB")
    running = [run_on("r", "a", 0, tier="urgent", mem=30.0)]
    decision = decide(snapshot(pool, running, [wait("w", mem=20.0)]), POLICY, NOW)
    (admission,) = decision.admit
    assert (admission.node, admission.gpu_indices) == ("b", (0,))


# -- a victim stopping for a job is kept for that job (load test: one job, two victims) ------

LOAD_POLICY = Policy(min_runtime_s=0)  # the load test's: anyone may be preempted at once


def asked_to_stop(running, decision):
    """The running segments as the next pass reads them back: each victim of `decision`
    labelled `yoloq.preempt=requested` and `yoloq.preempted_by=<its preemptor's job>`."""
    by = {p.segment_id: p.by_job_id for p in decision.preempt}
    return [replace(r, stopping=True, stopping_for=by[r.id]) if r.id in by else r for r in running]


def full_pool():
    """Three nodes of two slots, all busy: two low jobs (the only victims of a high job)."""
    pool = nodes(n1="2xV100-32GB", n2="2xV100-32GB", n3="2xV100-32GB")
    running = [run_on("v1", "n1", 0), run_on("v2", "n2", 0), run_on("h1", "n1", 1, tier="high"),
               run_on("h2", "n2", 1, tier="high"), run_on("h3", "n3", 0, tier="high"),
               run_on("h4", "n3", 1, tier="high")]
    return pool, running


@pytest.mark.parametrize("newcomer", [
    pytest.param(wait("q", tier="urgent"), id="a-more-urgent-job-arrives"),
    pytest.param(replace(wait("q", tier="high"), est_remaining_s=60.0),
                 id="a-shorter-high-job-arrives"),
])
def test_a_stopping_victim_is_kept_for_its_preemptor_across_passes(newcomer):
    """Pass 1: high job p asks low v1 to stop. Pass 2, v1 still training to its epoch boundary:
    q arrives and comes first in the queue. q used to take v1 (a stopping victim was anybody's),
    so p asked v2 too: two victims for one single-GPU job. Now q preempts for itself."""
    pool, running = full_pool()
    p = wait("p", tier="high")
    first = decide(snapshot(pool, running, [p]), LOAD_POLICY, NOW)
    assert [(x.job_id, x.by_job_id) for x in first.preempt] == [("v1", "p")]
    running = asked_to_stop(running, first)

    second = decide(snapshot(pool, running, [newcomer, p]), LOAD_POLICY, NOW + 1)
    assert [(x.job_id, x.by_job_id) for x in second.preempt] == [("v2", "q")]
    assert "GPU 0 on n1 frees when job v1 stops" in second.waiting["p/s1"]
    running = asked_to_stop(running, second)

    third = decide(snapshot(pool, running, [newcomer, p]), LOAD_POLICY, NOW + 2)
    assert third.preempt == ()
    assert "GPU 0 on n1 frees when job v1 stops" in third.waiting["p/s1"]
    assert "GPU 0 on n2 frees when job v2 stops" in third.waiting["q/s1"]


def test_a_job_ahead_that_cannot_preempt_does_not_hide_the_kept_victim():
    """q (same tier, first in the queue) finds no victim: that failure is not remembered for
    p, whose victim is kept for it."""
    pool, running = full_pool()
    running = [replace(r, stopping=True, stopping_for="p") if r.job_id == "v1" else
               replace(r, tier=Tier.HIGH) if r.job_id == "v2" else r for r in running]
    q = replace(wait("q", tier="high"), est_remaining_s=60.0)
    decision = decide(snapshot(pool, running, [q, wait("p", tier="high")]), LOAD_POLICY, NOW)
    assert decision.preempt == ()
    assert "GPU 0 on n1 frees when job v1 stops" in decision.waiting["p/s1"]
    assert "frees when" not in decision.waiting["q/s1"]


@pytest.mark.parametrize("p_waits", [
    pytest.param(False, id="its-job-no-longer-waits"),
    pytest.param(True, id="its-job-got-a-free-gpu-first"),
])
def test_a_kept_victim_is_anybodys_once_its_job_needs_it_no_more(p_waits):
    pool = nodes(n1="2xV100-32GB", n2="1xV100-32GB")
    running = [replace(run_on("v1", "n1", 0), stopping=True, stopping_for="p"),
               run_on("h1", "n1", 1, tier="high")]
    if not p_waits:
        running.append(run_on("u1", "n2", 0, tier="urgent"))
    waiting = [wait("p", tier="urgent")] * p_waits + [wait("q", tier="high")]
    decision = decide(snapshot(pool, running, waiting), LOAD_POLICY, NOW)
    assert decision.preempt == ()
    assert [a.job_id for a in decision.admit] == ["p"] * p_waits
    assert "GPU 0 on n1 frees when job v1 stops" in decision.waiting["q/s1"]


# -- the GPU a victim freed is held for its preemptor (work_pools.holds) ----------------------

def test_a_gpu_freed_by_a_victim_goes_to_the_job_it_stopped_for():
    """v1 stopped for p and has exited: GPU 0 on n1 is free. q (more urgent) comes first in the
    queue. Without the hold q takes that GPU and p preempts v2: two victims for p. With it, p
    is admitted there and q preempts v2 for itself (one victim per preemptor)."""
    pool, running = full_pool()
    running = [r for r in running if r.job_id != "v1"]  # its process is gone
    waiting = [wait("q", tier="urgent"), wait("p", tier="high")]
    free = snapshot(pool, running, waiting)
    unheld = decide(free, LOAD_POLICY, NOW)
    assert [(a.job_id, a.node) for a in unheld.admit] == [("q", "n1")]
    assert [(x.job_id, x.by_job_id) for x in unheld.preempt] == [("v2", "p")]

    held = decide(replace(free, held={("n1", 0): "p"}), LOAD_POLICY, NOW)
    assert [(a.job_id, a.node, a.gpu_indices) for a in held.admit] == [("p", "n1", (0,))]
    assert [(x.job_id, x.by_job_id) for x in held.preempt] == [("v2", "q")]


def test_a_hold_for_a_job_that_no_longer_waits_frees_the_gpu():
    pool, running = full_pool()
    running = [r for r in running if r.job_id != "v1"]
    decision = decide(replace(snapshot(pool, running, [wait("q", tier="low")]), held={("n1", 0): "p"}),
                      LOAD_POLICY, NOW)
    assert [(a.job_id, a.node) for a in decision.admit] == [("q", "n1")]


def test_stop_holds_follow_a_victim_from_stopping_to_exit_to_its_jobs_admission():
    from work_pools.holds import HOLD_S, StopHolds

    victim = replace(run_on("v1", "n1", 0), id="v1-run", stopping=True, stopping_for="p")
    where = {0: ("n1", 3)}  # the pass's global index 0 is GPU 3 of node n1
    holds = StopHolds()
    holds.observe([victim, run_on("h1", "n1", 1)], where)
    assert holds.current(["v1-run"], {"p"}, NOW) == {}, "still stopping: nothing to hold yet"
    assert holds.current([], {"p"}, NOW + 1) == {("n1", 3): "p"}, "exited: its GPU is held for p"
    assert holds.current([], {"p"}, NOW + 1 + HOLD_S - 1) == {("n1", 3): "p"}
    assert holds.current([], {"p"}, NOW + 1 + HOLD_S) == {}, "expired"

    holds.observe([victim], where)
    holds.current([], {"p"}, NOW)
    assert holds.current([], set(), NOW + 2) == {}, "p admitted or gone: the hold ends"

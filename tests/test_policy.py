"""Table tests for the pure scheduling core: each rule, and that `decide` is pure."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from work_pools.policy import (Policy, Quota, Snapshot, check_tier_allowed, decide,
                               effective_priority, estimate, fifo, las, priority,
                               starvation_bound_s)
from builders import make_gpus, make_job
from yoloq.domain.tiers import Tier

NOW = 100_000.0
POLICY = Policy(min_runtime_s=300, aging_step_s=3600, urgent_overrides_min_runtime=False,
                critical_path_share=0.0)


def running(job_id, *gpus, tier="low", mem=40.0, started=NOW - 1000, **kw):
    builder = make_job(job_id).tier(tier).mem(mem).running_on(*gpus, started=started, **kw)
    return builder


def waiting(job_id, tier="normal", mem=8.0, since=NOW - 10):
    return make_job(job_id).tier(tier).mem(mem).submitted(since)


def snap(gpus, run=(), wait=(), **kw):
    return Snapshot(gpus, tuple(r.obj() for r in run), tuple(w.obj() for w in wait), **kw)


def used(run, gpus_spec):
    """GPUs with the memory of the running segments already taken."""
    taken: dict[int, float] = {}
    for r in run:
        seg = r.obj()
        for i in seg.gpu_indices:
            taken[i] = taken.get(i, 0.0) + seg.est_mem_gb
    return make_gpus(gpus_spec, taken)


def admitted(decision):
    return {a.job_id: a.gpu_indices for a in decision.admit}


def preempted(decision):
    return [p.job_id for p in decision.preempt]


# -- memory-aware admission -------------------------------------------------------------

@pytest.mark.parametrize("mem, free_spec, used_gb, expect_gpus, reason", [
    pytest.param(12, "1xA100-80GB", {}, (0,), None, id="fits-empty-gpu"),
    pytest.param(12, "1xV100-16GB", {0: 6}, None, "waiting: no GPU with 12.0 GB free",
                 id="not-enough-free-memory"),
    pytest.param(12, "1xV100-16GB,1xA100-80GB", {}, (0,), None, id="best-fit-keeps-big-gpu"),
    pytest.param(90, "2xA100-80GB", {}, None, "needs 90.0 GB per GPU; the largest GPU has 80.0 GB",
                 id="larger-than-any-gpu"),
    pytest.param(4, "1xCPU", {}, (0,), None, id="declared-cpu-slot-counts"),
])
def test_admission_respects_free_memory(mem, free_spec, used_gb, expect_gpus, reason):
    gpus = make_gpus(free_spec, used_gb)
    decision = decide(snap(gpus, wait=[waiting("w", mem=mem)]), POLICY, NOW)
    assert admitted(decision).get("w") == expect_gpus
    if reason:
        assert reason in decision.waiting["w/s1"]


def test_gang_job_takes_all_its_gpus_or_none():
    gpus = make_gpus("2xV100-32GB")
    both = decide(snap(gpus, wait=[waiting("g", mem=10).gpus(2)]), POLICY, NOW)
    assert admitted(both) == {"g": (0, 1)}
    run = [running("r", 0, tier="urgent", mem=30)]
    blocked = decide(snap(used(run, "2xV100-32GB"), run, [waiting("g", mem=10).gpus(2)]), POLICY, NOW)
    assert admitted(blocked) == {} and "no 2 GPUs with 10.0 GB free" in blocked.waiting["g/s1"]


# -- ordering: tiers, aging, fair share ---------------------------------------------------

@pytest.mark.parametrize("first, second, policy, winner", [
    pytest.param(waiting("a", "low", since=NOW - 100), waiting("b", "urgent", since=NOW - 1),
                 POLICY, "b", id="more-urgent-tier-first"),
    pytest.param(waiting("a", "normal", since=NOW - 100), waiting("b", "normal", since=NOW - 1),
                 Policy(fair_share=False), "a", id="same-tier-submission-order"),
    pytest.param(waiting("a", "low", since=NOW - 2 * 3600 - 1), waiting("b", "normal", since=NOW - 1),
                 POLICY, "a", id="aging-lifts-low-past-normal"),
    pytest.param(waiting("a", "low", since=NOW - 9 * 3600), waiting("b", "urgent", since=NOW - 1),
                 POLICY, "b", id="aged-work-never-ahead-of-urgent"),
    pytest.param(waiting("a", "low", since=NOW - 2 * 3600 - 1), waiting("b", "normal", since=NOW - 1),
                 priority(), "b", id="priority-baseline-never-ages"),
    pytest.param(waiting("a", "low", since=NOW - 100), waiting("b", "urgent", since=NOW - 1),
                 fifo(), "a", id="fifo-ignores-tiers"),
    pytest.param(waiting("a", "urgent").attained(50_000), waiting("b", "low").attained(10),
                 las(), "b", id="las-least-attained-first"),
])
def test_one_gpu_goes_to_the_right_segment(first, second, policy, winner):
    decision = decide(snap(make_gpus("1xV100-32GB"), wait=[first, second]), policy, NOW)
    assert list(admitted(decision)) == [winner]


@pytest.mark.parametrize("tier, waited_s, policy, expected", [
    pytest.param("low", 0, POLICY, Tier.LOW, id="fresh"),
    pytest.param("low", 3599, POLICY, Tier.LOW, id="just-under-one-step"),
    pytest.param("low", 3600, POLICY, Tier.NORMAL, id="one-step"),
    pytest.param("low", 50 * 3600, POLICY, Tier.HIGH, id="capped-at-the-ceiling"),
    pytest.param("high", 50 * 3600, POLICY, Tier.HIGH, id="ceiling-tier-does-not-age"),
    pytest.param("low", 50 * 3600, Policy(max_aging_tiers=3, aging_ceiling=Tier.URGENT),
                 Tier.URGENT, id="urgent-ceiling-never-above-urgent"),
    pytest.param("low", 50 * 3600, priority(), Tier.LOW, id="priority-baseline-no-aging"),
])
def test_aging_boost_is_bounded(tier, waited_s, policy, expected):
    seg = waiting("a", tier, since=NOW - waited_s).obj()
    assert effective_priority(seg, NOW, policy) == int(expected)
    assert starvation_bound_s(POLICY) == 2 * 3600


def test_running_segment_keeps_the_boost_it_started_with():
    seg = running("r", 0, tier="low", started=NOW - 100).waiting_since(NOW - 100 - 3600).obj()
    assert effective_priority(seg, NOW, POLICY) == int(Tier.NORMAL)


def test_fair_share_admits_the_team_furthest_below_its_share_first():
    gpus = make_gpus("1xV100-32GB")
    wait = [waiting("a", since=NOW - 100).team("heavy"), waiting("b", since=NOW - 1).team("light")]
    usage = {"heavy": 5.0, "light": 1.0}
    decision = decide(snap(gpus, wait=wait, team_usage_tu=usage), POLICY, NOW)
    assert list(admitted(decision)) == ["b"]
    weighted = Policy(team_weights={"heavy": 10.0, "light": 1.0})
    decision = decide(snap(gpus, wait=wait, team_usage_tu=usage), weighted, NOW)
    assert list(admitted(decision)) == ["a"]


def test_fair_share_alternates_teams_within_one_round():
    gpus = make_gpus("4xV100-32GB")
    wait = [waiting(f"a{i}", since=NOW - 100 + i).team("a") for i in range(4)]
    wait += [waiting(f"b{i}", since=NOW - 50 + i).team("b") for i in range(4)]
    decision = decide(snap(gpus, wait=wait), POLICY, NOW)
    assert sorted(admitted(decision)) == ["a0", "a1", "b0", "b1"]


# -- preemption ------------------------------------------------------------------------

@pytest.mark.parametrize("run, wait, victims, reason", [
    pytest.param([running("low", 0, tier="low")], [waiting("u", "urgent", mem=60)], ["low"],
                 "preempted by job u (urgent) at epoch 1", id="urgent-preempts-low"),
    pytest.param([running("n", 0, tier="normal")], [waiting("n2", "normal", mem=60)], [], None,
                 id="same-tier-never"),
    pytest.param([running("u", 0, tier="urgent")], [waiting("l", "low", mem=60)], [], None,
                 id="lower-tier-never"),
    pytest.param([running("low", 0, tier="low", started=NOW - 100)], [waiting("u", "urgent", mem=60)],
                 [], None, id="inside-min-runtime-protected"),
    pytest.param([running("low", 0, tier="low", mem=10)], [waiting("u", "urgent", mem=81)], [], None,
                 id="never-unless-it-then-fits"),
    pytest.param([running("l", 0, tier="low"), running("n", 1, tier="normal")],
                 [waiting("u", "urgent", mem=60)], ["l"], None, id="lowest-tier-first"),
    pytest.param([running("old", 0, checkpoint=NOW - 900), running("new", 1, checkpoint=NOW - 30)],
                 [waiting("u", "urgent", mem=60)], ["new"], None, id="newest-checkpoint-first"),
    pytest.param([running("far", 0).progress(8, 10), running("near", 1).progress(2, 10)],
                 [waiting("u", "urgent", mem=60)], ["near"], None, id="least-progressed-first"),
    pytest.param([running("b", 0), running("a", 1)], [waiting("u", "urgent", mem=60)], ["a"], None,
                 id="id-tie-break"),
    pytest.param([running("s", 0, tier="normal").stopping()], [waiting("u", "urgent", mem=60)], [],
                 "waiting: GPU 0 frees when job s stops", id="already-stopping-is-reused"),
])
def test_preemption_rules(run, wait, victims, reason):
    count = 1 + max(i for r in run for i in r.obj().gpu_indices)
    gpus = used(run, f"{count}xA100-80GB")  # every GPU busy
    decision = decide(snap(gpus, run, wait), POLICY, NOW)
    assert preempted(decision) == victims
    assert admitted(decision) == {}
    if reason:
        texts = [p.reason for p in decision.preempt] + list(decision.waiting.values())
        assert any(reason in t for t in texts), texts


def test_preemption_frees_enough_across_a_gang_victim():
    run = [running("gang", 0, 1, tier="low", mem=70)]
    decision = decide(snap(used(run, "2xA100-80GB"), run, [waiting("u", "urgent", mem=60).gpus(2)]),
                      POLICY, NOW)
    assert preempted(decision) == ["gang"]
    assert "GPU 0, 1 frees" in decision.waiting["u/s1"]


def test_fair_share_preempts_within_a_tier_only_past_the_threshold():
    run = [running("hog", 0, tier="normal").team("hog")]
    wait = [waiting("poor", "normal", mem=60).team("poor")]
    gpus = used(run, "1xA100-80GB")
    far = decide(snap(gpus, run, wait, team_usage_tu={"hog": 9.0, "poor": 0.1}), POLICY, NOW)
    assert preempted(far) == ["hog"]
    assert "far over its fair share" in far.preempt[0].reason
    near = decide(snap(gpus, run, wait, team_usage_tu={"hog": 1.2, "poor": 0.8}), POLICY, NOW)
    assert preempted(near) == []


def test_partially_aged_segment_waits_for_a_boundary_instead_of_preempting():
    run = [running("n", 0, tier="normal")]
    aged = [waiting("l", "low", mem=60, since=NOW - 3600)]  # ranks as normal, not starving
    assert preempted(decide(snap(used(run, "1xA100-80GB"), run, aged), POLICY, NOW)) == []
    starving = [waiting("l", "low", mem=60, since=NOW - 2 * 3600)]
    decision = decide(snap(used(run, "1xA100-80GB"), run, starving), POLICY, NOW)
    assert preempted(decision) == ["n"]
    assert "(low, aged to high)" in decision.preempt[0].reason


# -- quotas and tier caps ---------------------------------------------------------------

QUOTA = Policy(quotas={"spender": Quota(tu=1.0, period="day")})


def test_quota_breach_is_listed_and_the_team_is_delayed():
    gpus = make_gpus("1xV100-32GB")
    wait = [waiting("s", "urgent", since=NOW - 500).team("spender"), waiting("o", "low").team("other")]
    decision = decide(snap(gpus, wait=wait, team_period_tu={"spender": 1.5}), QUOTA, NOW)
    assert [b.team for b in decision.quota_breaches] == ["spender"]
    assert list(admitted(decision)) == ["o"]
    assert decision.waiting["s/s1"].startswith("waiting: team over quota (1.50 of 1.00 TU this day)")


def test_delayed_team_runs_on_idle_gpus_and_is_preempted_first():
    alone = decide(snap(make_gpus("1xV100-32GB"), wait=[waiting("s").team("spender")],
                        team_period_tu={"spender": 2.0}), QUOTA, NOW)
    assert list(admitted(alone)) == ["s"]
    run = [running("s", 0, tier="urgent").team("spender"), running("l", 1, tier="low")]
    decision = decide(snap(used(run, "2xA100-80GB"), run, [waiting("o", "low", mem=60).team("other")],
                           team_period_tu={"spender": 2.0}), QUOTA, NOW)
    assert preempted(decision) == ["s"]
    assert "team spender is over quota" in decision.preempt[0].reason


@pytest.mark.parametrize("team, tier, allowed", [
    pytest.param("oncall", "urgent", True, id="listed-team-may-submit-urgent"),
    pytest.param("vision", "urgent", False, id="default-cap-blocks-urgent"),
    pytest.param("vision", "high", True, id="default-cap-allows-high"),
    pytest.param("interns", "normal", False, id="team-capped-at-low"),
])
def test_check_tier_allowed(team, tier, allowed):
    policy = Policy(default_tier_cap=Tier.HIGH, tier_caps={"oncall": Tier.URGENT, "interns": Tier.LOW})
    problem = check_tier_allowed(team, tier, policy)
    assert (problem is None) == allowed
    if not allowed:
        assert f"may not submit {tier} jobs" in problem


# -- long vs short, sharing, reduced batch ------------------------------------------------

@pytest.mark.parametrize("held_share, short_waiting, winner", [
    pytest.param(0.8, True, "short", id="long-holder-yields-to-short"),
    pytest.param(0.5, True, "full", id="under-70-percent-keeps-its-place"),
    pytest.param(0.8, False, "full", id="no-short-waiting-nothing-to-yield-to"),
])
def test_seventy_percent_rule(held_share, short_waiting, winner):
    window = POLICY.long_job_window_s
    full = make_job("full").submitted(NOW - 9000).waiting_since(NOW).full(held_share * window)
    other = make_job("short").submitted(NOW - 10)
    other = other.short() if short_waiting else other.full(0)
    submit_order = replace(POLICY, within_rank="submit")  # the rule alone, without SRPT
    decision = decide(snap(make_gpus("1xV100-32GB"), wait=[full, other]), submit_order, NOW)
    assert list(admitted(decision)) == [winner]
    if winner == "short":
        assert "yielding to short experiments (held a GPU 80%" in decision.waiting["full/s1"]


@pytest.mark.parametrize("share, expected", [
    pytest.param(True, {"a": (0,), "b": (0,)}, id="share-on-small-jobs-share"),
    pytest.param(False, {"a": (0,)}, id="share-off-one-per-gpu"),
])
def test_share_gpus(share, expected):
    wait = [waiting("a", mem=10, since=NOW - 2), waiting("b", mem=10, since=NOW - 1)]
    decision = decide(snap(make_gpus("1xV100-32GB"), wait=wait), Policy(share_gpus=share), NOW)
    assert admitted(decision) == expected


@pytest.mark.parametrize("allow, batch", [
    pytest.param(True, 7, id="reduced-batch-largest-that-fits"),
    pytest.param(False, None, id="off-by-default-waits"),
])
def test_reduced_batch(allow, batch):
    seg = waiting("r", mem=18).batch(16, per_image_gb=2.0, fixed_gb=2.0)  # 2 + 2 * 7 = 16 GB
    decision = decide(snap(make_gpus("1xV100-16GB"), wait=[seg]), Policy(allow_reduced_batch=allow), NOW)
    if batch is None:
        assert admitted(decision) == {}
    else:
        assert decision.admit[0].batch == batch
        assert "with batch 7 instead of 16" in decision.admit[0].reason


# -- purity and ETA ----------------------------------------------------------------------

def _busy_snapshot():
    run = [running("l", 0, tier="low", checkpoint=NOW - 60), running("n", 1, tier="normal"),
           running("s", 2, tier="high").stopping()]
    wait = [waiting(f"w{i}", tier=t, mem=m, since=NOW - 50 * i).team(team)
            for i, (t, m, team) in enumerate([("urgent", 60, "a"), ("high", 30, "b"), ("low", 8, "a"),
                                               ("normal", 90, "b"), ("normal", 20, "c")])]
    return snap(used(run, "3xA100-80GB,1xV100-32GB"), run, wait,
                team_usage_tu={"a": 2.0, "b": 0.5}, team_period_tu={"a": 3.0})


def test_decide_does_not_mutate_its_input_and_is_deterministic():
    snapshot = _busy_snapshot()
    policy = Policy(quotas={"a": Quota(1.0)}, share_gpus=True)
    before = copy.deepcopy((snapshot, policy))
    first = decide(snapshot, policy, NOW)
    assert (snapshot, policy) == before
    assert decide(copy.deepcopy(snapshot), policy, NOW) == first
    every = {s.id for s in snapshot.waiting}
    assert every == set(first.waiting) | {a.segment_id for a in first.admit}


def test_eta_positions_and_interval():
    run = [running("r", 0, tier="normal").remaining(3600)]
    wait = [waiting("a", since=NOW - 100).remaining(1800), waiting("b", since=NOW - 50).remaining(600)]
    snapshot = snap(used(run, "1xV100-32GB"), run, wait)
    hourly = dict(fair_share=False, aging_step_s=3600.0)  # no job starves within the horizon
    etas = estimate(snapshot, Policy(within_rank="submit", **hourly), NOW)
    a, b = etas["a/s1"], etas["b/s1"]
    assert (a.position, b.position) == (1, 2)
    assert a.start_s == pytest.approx(NOW + 3600) and b.start_s == pytest.approx(NOW + 5400)
    for eta in (a, b):
        assert eta.start_low_s < eta.start_s < eta.start_high_s
    srpt = estimate(snapshot, Policy(**hourly), NOW)  # the shorter job goes first,
    assert (srpt["b/s1"].position, srpt["a/s1"].position) == (1, 2)  # and takes the GPU at
    assert srpt["b/s1"].start_s == pytest.approx(NOW + 200)  # r's segment boundary (started
    assert srpt["a/s1"].start_s == pytest.approx(NOW + 800)  # NOW-1000, 600 s segments)

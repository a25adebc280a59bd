"""Finish-time-fairness-aware fair share (issue 26): a team whose jobs pile up against an equal
share of the cluster is boosted (`ftf.team_rho`, `Policy.ftf_weight_power`), and since the
projection uses the rate each team is getting, weights still hold."""

from __future__ import annotations

import pytest

from builders import make_gpus, make_job
from work_pools.policy import Policy, Snapshot, decide, yoloq
from work_pools.policy.columns import Columns
from work_pools.policy.ftf import REFERENCE, team_rho
from work_pools.simulate import TraceJob, parse_cluster, simulate
from yoloq.domain.tiers import Tier

NOW = 100_000.0
HOUR = 3600.0
DAY = 86400.0


def waiting_jobs(team: str, count: int, submitted: float = NOW - 60) -> list:
    return [make_job(f"{team}{i}").team(team).remaining(HOUR).submitted(submitted).obj()
            for i in range(count)]


def rho_of(waiting: list, usage: dict[str, float], policy: Policy = Policy(),
           gpus: int = 1) -> dict[str, float]:
    running, queued = Columns(()), Columns(waiting)
    return team_rho(running, queued, NOW, policy, usage, gpus, 1.0)


def test_a_longer_backlog_at_the_same_rate_projects_worse():
    rho = rho_of(waiting_jobs("heavy", 6) + waiting_jobs("light", 1), {"heavy": 1.0, "light": 1.0})
    assert rho["heavy"] > rho[REFERENCE] > rho["light"]


@pytest.mark.parametrize("weights, usage", [
    pytest.param({}, {"a": 0.5, "b": 0.5}, id="equal-weights-equal-rates"),
    pytest.param({"a": 2.0}, {"a": 1.0, "b": 0.5}, id="served-two-to-one-at-weight-two"),
])
def test_a_team_served_at_its_weight_projects_like_the_others(weights, usage):
    """Just submitted (the time already waited is not scaled by the weights)."""
    waiting = waiting_jobs("a", 4, submitted=NOW) + waiting_jobs("b", 4, submitted=NOW)
    rho = rho_of(waiting, usage, Policy(team_weights=weights))
    assert rho["a"] == pytest.approx(rho["b"], rel=0.01)


@pytest.mark.parametrize("power, first", [
    pytest.param(2.0, "heavy0", id="the-team-whose-jobs-pile-up-goes-first"),
    pytest.param(0.0, "light0", id="off-equal-usage-earlier-submit-first"),
])
def test_projected_fairness_orders_teams_of_equal_usage(power, first):
    """Equal decayed usage, equal jobs: usage alone cannot tell the teams apart."""
    waiting = waiting_jobs("light", 1, submitted=NOW - 120) + waiting_jobs("heavy", 6)
    snapshot = Snapshot(make_gpus("1xV100-32GB"), (), tuple(waiting),
                        team_usage_tu={"heavy": 1.0, "light": 1.0})
    policy = Policy(ftf_weight_power=power, critical_path_share=0.0)
    assert [a.job_id for a in decide(snapshot, policy, NOW).admit] == [first]


def _stream(team: str) -> list[TraceJob]:
    """A 1 h job every 5 minutes for 2 days: each team alone would overload 6 GPUs twice."""
    return [TraceJob(f"{team}{i:03d}", team, Tier.NORMAL, i * 300.0, 1, 8.0, HOUR, 12, "yolov8n")
            for i in range(576)]


def test_steady_streams_keep_a_two_to_one_weighting_closer_with_the_term():
    """SRPT aging favours the team that waits longer (the lighter one); the projection sees
    that team's backlog is short for the rate it gets, and takes the advantage back."""
    trace = _stream("a") + _stream("b")
    ratios = {}
    for power in (0.0, 2.0):
        policy = yoloq(team_weights={"a": 2.0, "b": 1.0}, usage_half_life_s=6 * 3600,
                       ftf_weight_power=power)
        result = simulate(trace, parse_cluster("6xV100-32GB"), policy, until=2 * DAY, eta=False)
        ratios[power] = result.team_tu["a"] / result.team_tu["b"]
    assert abs(ratios[2.0] - 2.0) < abs(ratios[0.0] - 2.0) - 0.05, ratios


def test_one_starved_team_does_not_erase_the_usage_order_of_the_others():
    """A team with nothing running and almost no usage projects a rho thousands of times the
    others' (a pool minutes old: its decayed usage shows a rate near zero). Measured against
    all teams' jobs pooled, which that team drags up, every other team's factor hit the clamp
    and their usage no longer told them apart: the earliest submitted went first (b0, as the
    load scenario's team b took 24% against a 20% share). Against the teams' median they keep
    their order."""
    waiting = [make_job(f"{team}0").team(team).remaining(60).submitted(NOW - 60 + k).obj()
               for k, team in enumerate("bcda")]
    usage = {"a": 1e-5, "b": 0.03, "c": 0.02, "d": 0.01}  # TU, minutes into a day's half-life
    snapshot = Snapshot(make_gpus("3xV100-32GB"), (), tuple(waiting), team_usage_tu=usage)
    policy = Policy(critical_path_share=0.0)
    admitted = [a.job_id for a in decide(snapshot, policy, NOW).admit]
    assert admitted == ["a0", "d0", "c0"]

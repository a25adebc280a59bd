"""Fair share and quotas: the pure ledger functions, and simulated guarantees."""

from __future__ import annotations

import pytest

from work_pools.policy import Policy, Quota, UsageLedger, charge, share_ratios, tu, yoloq
from work_pools.policy.fairshare import decay, period_start, quota_breaches
from work_pools.simulate import TraceJob, parse_cluster, simulate
from yoloq.domain.tiers import Tier

DAY = 86400.0


@pytest.mark.parametrize("speed, seconds, gpus, expected", [
    pytest.param(1.0, DAY, 1, 1.0, id="one-v100-day-is-one-tu"),
    pytest.param(2.4, DAY / 2, 1, 1.2, id="a100-half-day"),
    pytest.param(1.0, DAY, 8, 8.0, id="eight-gpus"),
])
def test_training_units(speed, seconds, gpus, expected):
    assert tu(speed, seconds, gpus) == pytest.approx(expected)


@pytest.mark.parametrize("elapsed, expected", [
    pytest.param(0, 8.0, id="no-time"),
    pytest.param(3600, 4.0, id="one-half-life"),
    pytest.param(3 * 3600, 1.0, id="three-half-lives"),
])
def test_decay_halves_per_half_life(elapsed, expected):
    assert decay({"a": 8.0}, elapsed, 3600)["a"] == pytest.approx(expected)


def test_charge_decays_then_adds_and_resets_the_quota_period():
    policy = Policy(usage_half_life_s=DAY, quotas={"w": Quota(5.0, "week")})
    ledger = charge(UsageLedger(), {"d": 1.0, "w": 1.0}, 11 * DAY + 100, policy)  # a Monday
    later = charge(ledger, {"d": 1.0}, 12 * DAY + 100, policy)  # next day, same week
    assert later.decayed_tu["d"] == pytest.approx(1.5)
    assert later.period_tu == {"d": 1.0, "w": 1.0}  # day quota restarted, week kept
    assert ledger.period_tu == {"d": 1.0, "w": 1.0}  # inputs are never changed
    next_week = charge(later, {}, period_start(later.updated_at, "week") + 7 * DAY, policy)
    assert next_week.period_tu == {}


def test_period_start_is_utc_midnight_and_monday():
    assert period_start(DAY * 3 + 5, "day") == DAY * 3
    assert period_start(DAY * 6, "week") == DAY * 4  # 1970-01-05 was a Monday


@pytest.mark.parametrize("usage, weights, expected", [
    pytest.param({"a": 1.0, "b": 1.0}, {}, {"a": 1.0, "b": 1.0}, id="equal"),
    pytest.param({"a": 3.0, "b": 1.0}, {}, {"a": 1.5, "b": 0.5}, id="a-over-b-under"),
    pytest.param({"a": 2.0, "b": 1.0}, {"a": 2.0}, {"a": 1.0, "b": 1.0}, id="weighted-2-to-1-is-fair"),
    pytest.param({}, {}, {"a": 0.0, "b": 0.0}, id="no-usage-yet"),
])
def test_share_ratios(usage, weights, expected):
    assert share_ratios(usage, ["a", "b"], Policy(team_weights=weights)) == pytest.approx(expected)


def test_quota_breaches_list_only_teams_at_or_over_budget():
    policy = Policy(quotas={"a": Quota(2.0), "b": Quota(2.0, "week")})
    breaches = quota_breaches({"a": 2.0, "b": 1.9}, policy)
    assert [(b.team, b.budget_tu, b.period) for b in breaches] == [("a", 2.0, "day")]


def _backlog(team, count, tier=Tier.NORMAL, start=0.0, duration=3600.0):
    return [TraceJob(f"{team}{i:03d}", team, tier, start + i, 1, 8.0, duration, 12, "yolov8n")
            for i in range(count)]


def test_weights_two_to_one_converge_to_two_to_one():
    """Both teams keep a backlog; after 2 simulated days the GPU time split is 2:1 within 10%."""
    trace = _backlog("a", 400) + _backlog("b", 400)
    policy = yoloq(team_weights={"a": 2.0, "b": 1.0}, usage_half_life_s=6 * 3600)
    result = simulate(trace, parse_cluster("6xV100-32GB"), policy, until=2 * DAY, eta=False)
    ratio = result.team_tu["a"] / result.team_tu["b"]
    assert 1.8 <= ratio <= 2.2, ratio


def test_quota_breach_delays_the_team_until_the_period_ends():
    """"burst" has 0.25 TU a day: once spent, "steady" jobs start within a segment even
    though burst's jobs are high tier, and burst runs again the next day."""
    policy = yoloq(quotas={"burst": Quota(0.25, "day")})
    trace = _backlog("burst", 40, Tier.HIGH, duration=7200.0)
    trace += _backlog("steady", 6, Tier.LOW, start=4 * 3600.0, duration=1800.0)
    result = simulate(trace, parse_cluster("2xV100-32GB"), policy, eta=False)
    by_id = {j.id: j for j in result.jobs}
    steady_waits = [by_id[f"steady{i:03d}"].first_start - by_id[f"steady{i:03d}"].spec.submit_time
                    for i in range(6)]
    assert max(sorted(steady_waits)[:2]) <= 600  # both GPUs taken from the delayed team at once
    assert max(steady_waits) <= 2 * 1800 + 600  # then back to back, burst never in between
    steady_done = max(by_id[f"steady{i:03d}"].finish for i in range(6))
    burst_started = [j.first_start for j in result.jobs if j.spec.team == "burst" and j.first_start is not None]
    assert not [t for t in burst_started if 4 * 3600.0 <= t < steady_done - 1800], \
        "no burst job starts while steady work waits"
    assert all(j.finish is not None for j in result.jobs)

"""ETA calibration (issue 13 item 3): conformal-style, per tier and load, pure."""

from __future__ import annotations

import math
import random

import pytest

from work_pools.policy.calibrate import (Calibrator, EtaRecord, apply, arrival_inflation,
                                         calibrate, load_bucket)


def _records(n, bias, sigma, tier=3, load=1800.0, seed=0):
    """The forward run predicts `bias` times too short, with lognormal noise `sigma`."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        predicted = rng.uniform(600, 7200)
        actual = (predicted + 60) * bias * math.exp(rng.gauss(0, sigma)) - 60
        out.append(EtaRecord(tier, load, predicted, max(actual, 0.0)))
    return out


def test_too_few_records_leave_the_raw_interval():
    interval = calibrate(_records(5, 2.0, 0.3), 3, 1800.0, 1000.0, 800.0, 1300.0)
    assert (interval.wait_s, interval.low_s, interval.high_s, interval.records) == (
        1000.0, 800.0, 1300.0, 0)


def test_calibration_shifts_and_widens_to_about_80_percent():
    history, future = _records(400, 3.0, 0.6, seed=1), _records(400, 3.0, 0.6, seed=2)
    calibrator = Calibrator()
    for record in history:
        calibrator.add(record)
    inside, errors = 0, []
    for record in future:
        got = calibrator.interval(record.predicted_s, record.predicted_s, record.predicted_s,
                                  3, 1800.0)
        inside += got.low_s <= record.actual_s <= got.high_s
        errors.append(abs(got.wait_s - record.actual_s) / max(record.actual_s, 60.0))
    assert 0.75 <= inside / len(future) <= 0.88
    raw_errors = sorted(abs(r.predicted_s - r.actual_s) / max(r.actual_s, 60.0) for r in future)
    assert sorted(errors)[len(errors) // 2] < 0.7 * raw_errors[len(raw_errors) // 2]  # bias removed


def test_scope_falls_back_from_tier_and_load_to_tier_to_all():
    calibrator = Calibrator(min_records=20)
    for record in _records(30, 2.0, 0.1, tier=3, load=100.0):
        calibrator.add(record)
    assert calibrator.interval(1000, 1000, 1000, 3, 100.0).scope == "tier+load+size"
    assert calibrator.interval(1000, 1000, 1000, 3, 50_000.0).scope == "tier+size"
    assert calibrator.interval(1000, 1000, 1000, 3, 50_000.0, 90_000.0).scope == "tier"
    assert calibrator.interval(1000, 1000, 1000, 1, 100.0).scope == "all"


def test_window_keeps_the_newest_records():
    calibrator = Calibrator(window=50, min_records=10)
    for record in _records(200, 1.0, 0.01) + _records(50, 4.0, 0.01, seed=9):
        calibrator.add(record)
    got = calibrator.interval(1000.0, 1000.0, 1000.0, 3, 1800.0)
    assert got.wait_s == pytest.approx(4 * 1060 - 60, rel=0.05)


def test_apply_is_monotone_and_never_negative():
    got = apply(0.0, [-3.0, -2.0, -1.0, 0.0, 1.0] * 10)
    assert 0.0 == got.low_s <= got.wait_s <= got.high_s


@pytest.mark.parametrize("rates, rank, gpus, expected", [
    pytest.param({1: 2.0, 3: 4.0}, 1, 16, 1 / (1 - 2 / 16), id="only-higher-or-equal-ranks"),
    pytest.param({1: 2.0, 3: 4.0}, 3, 16, 1 / (1 - 6 / 16), id="all-ranks-up-to-mine"),
    pytest.param({1: 50.0}, 1, 16, 10.0, id="capped-when-overloaded"),
    pytest.param({}, 4, 16, 1.0, id="no-arrivals"),
])
def test_arrival_inflation(rates, rank, gpus, expected):
    assert arrival_inflation(rates, rank, gpus) == pytest.approx(expected)


def test_load_buckets_are_ordered():
    assert [load_bucket(x) for x in (0, 599, 600, 3600, 20_000, 1e9)] == [0, 0, 1, 2, 3, 4]

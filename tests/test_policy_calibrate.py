"""ETA calibration (issue 13 item 3): conformal-style, from the nearest past predictions, pure."""

from __future__ import annotations

import math
import random

import pytest

from work_pools.policy.calibrate import (
    Calibrator,
    EtaRecord,
    apply,
    arrival_inflation,
    calibrate,
    load_bucket,
)


def _fixed(n, predicted, ratio, tier=3, load=1800.0, arrivals=1.0):
    """`n` records whose actual wait is `ratio` times the prediction (floor included)."""
    return [EtaRecord(tier, load, predicted, (predicted + 60) * ratio - 60, arrivals=arrivals)
            for _ in range(n)]


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
    interval = calibrate(_records(5, 2.0, 0.3), 3, 1800.0, 1000.0, 800.0, 1300.0)  # < 10
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


def test_nearest_records_decide_short_and_long_waits_apart():
    """Short raw waits were right, long ones three times too short: each is corrected by
    its own kind."""
    calibrator = Calibrator(min_records=10, neighbours=20)
    for record in _fixed(30, 300.0, 1.0) + _fixed(30, 20_000.0, 3.0):
        calibrator.add(record)
    short = calibrator.interval(300.0, 300.0, 300.0, 3, 1800.0)
    long = calibrator.interval(20_000.0, 20_000.0, 20_000.0, 3, 1800.0)
    assert short.wait_s == pytest.approx(300.0) and short.scope == "neighbours"
    assert long.wait_s == pytest.approx(3 * 20_060 - 60)


def test_starts_now_is_its_own_class():
    """Records of jobs the forward run started at once never shift a queued job."""
    calibrator = Calibrator(min_records=10)
    for record in _fixed(40, 0.0, 1.0):
        calibrator.add(record)
    assert calibrator.interval(900.0, 800.0, 1000.0, 3, 1800.0).records == 0
    assert calibrator.interval(0.0, 0.0, 0.0, 3, 1800.0).wait_s == 0.0


@pytest.mark.parametrize("near, far", [
    pytest.param({"tier": 3}, {"tier": 1}, id="same-tier-first"),
    pytest.param({"load": 1800.0}, {"load": 200_000.0}, id="similar-load-first"),
    pytest.param({"arrivals": 1.0}, {"arrivals": 10.0}, id="similar-arrivals-first"),
])
def test_features_pick_the_neighbours(near, far):
    calibrator = Calibrator(min_records=10, neighbours=20)
    for record in _fixed(20, 1000.0, 2.0, **near) + _fixed(20, 1000.0, 0.5, **far):
        calibrator.add(record)
    got = calibrator.interval(1000.0, 1000.0, 1000.0, 3, 1800.0, arrivals=1.0)
    assert got.wait_s == pytest.approx(2 * 1060 - 60)


def test_window_keeps_the_newest_records():
    calibrator = Calibrator(window=50, min_records=10, neighbours=50)
    for record in _fixed(200, 1000.0, 1.0) + _fixed(50, 1000.0, 4.0):
        calibrator.add(record)
    got = calibrator.interval(1000.0, 1000.0, 1000.0, 3, 1800.0)
    assert got.wait_s == pytest.approx(4 * 1060 - 60) and len(calibrator) == 50


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

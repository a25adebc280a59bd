"""Adaptive conformal level: misses widen the interval, hits narrow it (issue 13 item 3)."""

from __future__ import annotations

from work_pools.policy.calibrate import ALPHA_RANGE, TARGET_MISS, Calibrator, EtaRecord


def _calibrator() -> Calibrator:
    calibrator = Calibrator(min_records=5)
    for n in range(50):
        calibrator.add(EtaRecord(3, 100.0, 1000.0, 1000.0 * (0.5 + n / 50)))
    return calibrator


def test_misses_widen_and_hits_narrow_the_interval():
    base = _calibrator().interval(1000, 1000, 1000, 3, 100.0)
    missing, hitting = _calibrator(), _calibrator()
    for _ in range(10):
        missing.observe(False)  # alpha 0.2 -> 0.12
    for _ in range(60):
        hitting.observe(True)  # alpha 0.2 -> 0.32
    wide = missing.interval(1000, 1000, 1000, 3, 100.0)
    narrow = hitting.interval(1000, 1000, 1000, 3, 100.0)
    assert missing.alpha < TARGET_MISS < hitting.alpha
    assert wide.high_s - wide.low_s > base.high_s - base.low_s > narrow.high_s - narrow.low_s


def test_alpha_stays_in_its_range():
    calibrator = _calibrator()
    for _ in range(1000):
        calibrator.observe(False)
    assert calibrator.alpha == ALPHA_RANGE[0]

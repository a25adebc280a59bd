"""ETA calibration from the queue's own history (conformal-style), pure.

`estimate` runs the policy forward over today's queue; it cannot see work not
yet submitted and trusts the duration estimates, so its raw wait is biased in a
way that depends on the situation: a wait the forward run puts at the next
segment boundary is usually about right, one it puts hours away is often too
short (new shorter work goes first). The calibrator learns that dependence
from what the queue actually did:

1. Every prediction is recorded with the actual start (`EtaRecord`: tier, load,
   raw predicted wait, actual wait, and the arrival factor at that time).
2. For a new prediction it takes the `neighbours` most similar past records of
   the same class (the forward run said "starts now", or it did not). Distance:
   |ln(p + F) - ln(p' + F)| for the raw waits, plus `TIER_WEIGHT` when the tier
   differs, plus `LOAD_WEIGHT` x |ln(L + F) - ln(L' + F)| for the load, plus
   `ARRIVAL_WEIGHT` x |ln a - ln a'| for the arrival factor; F = `FLOOR_S`.
   Ties go to the newer record.
3. Their log-ratio errors r = ln((actual + F) / (predicted + F)) shift and widen
   the prediction: the shown wait is (p + F) exp(median r) - F, and the 80%
   interval uses the split-conformal quantiles of r at levels
   floor((n+1) alpha/2)/n and ceil((n+1)(1 - alpha/2))/n.
4. The miscoverage level alpha adapts online (adaptive conformal inference,
   Gibbs & Candes 2021): each shown interval that missed the actual start
   lowers it by `ACI_STEP` x 0.8, each that held raises it by `ACI_STEP` x 0.2,
   so the long-run share of starts inside tracks 80% even when errors drift.
5. Arrivals: `arrival_inflation` turns the observed arrival rate of work of the
   job's rank or more urgent into a factor 1 / (1 - rho) (rho: the GPU share
   that work keeps busy). Multiplying the wait by it (a busy-period bound)
   made the median error 24x worse on the overloaded trace, because under SRPT
   most newcomers are not ahead of the job; instead the factor is a
   neighbour feature: a prediction made while work ahead of the job was
   arriving fast is corrected by records made under similar arrivals.

Load is the queue's drain time: waiting GPU-seconds ahead / GPUs, in seconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FLOOR_S = 60.0
LOAD_EDGES_S = (600.0, 3600.0, 4 * 3600.0, 16 * 3600.0)  # for display and tests
NOW_S = 1.0  # a raw wait below this means "starts now"
TIER_WEIGHT = 0.5
LOAD_WEIGHT = 0.5
ARRIVAL_WEIGHT = 0.25
MAX_INFLATION_RHO = 0.9
TARGET_MISS = 0.2  # an 80% interval
ACI_STEP = 0.01
ALPHA_RANGE = (0.02, 0.5)


@dataclass(frozen=True)
class EtaRecord:
    """One past prediction and what happened. Waits are seconds from the prediction;
    `predicted_s` is the raw forward-run wait, `arrivals` the arrival factor then."""

    tier: int
    load_s: float
    predicted_s: float
    actual_s: float
    size_s: float = 0.0  # the job's remaining work (GPU-seconds); kept for reports
    arrivals: float = 1.0


@dataclass(frozen=True)
class Interval:
    """A calibrated wait: median and 80% interval, in seconds from the prediction.
    `records` says how many past predictions it rests on (0: uncalibrated)."""

    wait_s: float
    low_s: float
    high_s: float
    records: int = 0
    scope: str = "none"  # "neighbours", "given" or "none"


@dataclass(frozen=True)
class _Point:
    """A record as the distance sees it (logs computed once)."""

    now: bool
    tier: int
    log_p: float
    log_load: float
    log_arrivals: float
    error: float


def load_bucket(load_s: float) -> int:
    return bisect.bisect_right(LOAD_EDGES_S, max(0.0, load_s))


def log_error(record: EtaRecord) -> float:
    return math.log((record.actual_s + FLOOR_S) / (max(record.predicted_s, 0.0) + FLOOR_S))


def _point(tier: int, load_s: float, predicted_s: float, arrivals: float,
           error: float = 0.0) -> _Point:
    return _Point(predicted_s < NOW_S, tier, math.log(max(predicted_s, 0.0) + FLOOR_S),
                  math.log(max(load_s, 0.0) + FLOOR_S), math.log(max(arrivals, 1.0)), error)


def _distance(a: _Point, b: _Point) -> float:
    return (abs(a.log_p - b.log_p) + TIER_WEIGHT * (a.tier != b.tier)
            + LOAD_WEIGHT * abs(a.log_load - b.log_load)
            + ARRIVAL_WEIGHT * abs(a.log_arrivals - b.log_arrivals))


class Calibrator:
    """Calibration state as plain data: the newest `window` records. `add` appends,
    `interval` reads, `observe` adapts the level after a shown interval is scored."""

    def __init__(self, window: int = 2000, min_records: int = 10, neighbours: int = 25) -> None:
        self.window = window
        self.min_records = min_records
        self.neighbours = neighbours
        self._points: deque[_Point] = deque(maxlen=window)
        self._records: deque[EtaRecord] = deque(maxlen=window)
        self.alpha = TARGET_MISS

    def __len__(self) -> int:
        return len(self._points)

    def observe(self, covered: bool) -> None:
        """A shown interval held (`covered`) or missed: adapt the miscoverage level (ACI)."""
        self.alpha += ACI_STEP * (TARGET_MISS - (0.0 if covered else 1.0))
        self.alpha = min(max(self.alpha, ALPHA_RANGE[0]), ALPHA_RANGE[1])

    def records(self) -> list[EtaRecord]:
        """The records kept, oldest first (what a new leader restores)."""
        return list(self._records)

    def add(self, record: EtaRecord) -> None:
        self._records.append(record)
        self._points.append(_point(record.tier, record.load_s, record.predicted_s,
                                   record.arrivals, log_error(record)))

    def errors_for(self, tier: int, load_s: float, predicted_s: float,
                   arrivals: float = 1.0) -> list[float]:
        """Log-ratio errors of the `neighbours` nearest records of the same class."""
        query = _point(tier, load_s, predicted_s, arrivals)
        same = [(p, age) for age, p in enumerate(reversed(self._points)) if p.now == query.now]
        nearest = heapq.nsmallest(self.neighbours, same,
                                  key=lambda item: (_distance(item[0], query), item[1]))
        return [p.error for p, _ in nearest]

    def interval(self, predicted_s: float, low_s: float, high_s: float, tier: int,
                 load_s: float, size_s: float = 0.0, arrivals: float = 1.0) -> Interval:
        errors = self.errors_for(tier, load_s, predicted_s, arrivals)
        if len(errors) < self.min_records:
            return Interval(predicted_s, low_s, high_s, 0, "none")
        return apply(predicted_s, errors, "neighbours", self.alpha)


def calibrate(records: Iterable[EtaRecord], tier: int, load_s: float, predicted_s: float,
              low_s: float | None = None, high_s: float | None = None, *,
              arrivals: float = 1.0, min_records: int = 10, window: int = 2000) -> Interval:
    """The calibrated wait for a raw prediction of `predicted_s` from past records. With
    fewer than `min_records` records of its class, the raw interval comes back unchanged."""
    calibrator = Calibrator(window=window, min_records=min_records)
    for record in records:
        calibrator.add(record)
    low = predicted_s if low_s is None else low_s
    high = predicted_s if high_s is None else high_s
    return calibrator.interval(predicted_s, low, high, tier, load_s, arrivals=arrivals)


def apply(predicted_s: float, errors: Sequence[float], scope: str = "given",
          alpha: float = TARGET_MISS) -> Interval:
    """Shift `predicted_s` by the median error and widen it by the empirical error
    quantiles (split conformal, a central 1 - alpha interval)."""
    ordered = sorted(errors)
    n = len(ordered)
    lo = ordered[max(0, math.floor((n + 1) * alpha / 2) - 1)]
    hi = ordered[min(n - 1, math.ceil((n + 1) * (1 - alpha / 2)) - 1)]
    base = max(predicted_s, 0.0) + FLOOR_S

    def at(r: float) -> float:
        return max(0.0, base * math.exp(r) - FLOOR_S)

    return Interval(at(_median(ordered)), at(lo), at(hi), n, scope)


def arrival_inflation(rates_gpu_s_per_s: Mapping[int, float], rank: int, gpus: float) -> float:
    """1 / (1 - rho), rho = the GPU share that work of rank <= `rank` arriving at the
    observed rates (GPU-seconds per second, by rank) keeps busy, capped at
    `MAX_INFLATION_RHO`."""
    if gpus <= 0:
        return 1.0
    rho = sum(rate for r, rate in rates_gpu_s_per_s.items() if r <= rank) / gpus
    return 1.0 / (1.0 - min(max(rho, 0.0), MAX_INFLATION_RHO))


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

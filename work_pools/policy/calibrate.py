"""ETA calibration from the queue's own history (conformal-style), pure.

`estimate` runs the policy forward over today's queue; it ignores future
arrivals and aging and trusts the duration estimates, so its raw interval is
too narrow and biased when the queue is busy. The calibrator corrects it with
what the queue actually did:

1. Every prediction is recorded with the actual start (`EtaRecord`: tier,
   load, predicted wait, actual wait).
2. For a new prediction of tier t at load L for a job of size S (its remaining
   GPU-seconds; 0 when unknown), take the records of the same tier, load bucket
   and size bucket (falling back to tier and size, to the tier, then to all
   records, while fewer than `min_records`; the newest `window` records of each
   group) and their log-ratio errors r = ln((actual + F) / (predicted + F)),
   F = `FLOOR_S`. Size matters because shortest-remaining-work ordering lets
   small jobs pass the queue and makes large ones wait for work not yet
   submitted.
3. The calibrated start is predicted x exp(q50(r)); the 80% interval uses the
   split-conformal quantiles of r at levels floor((n+1) 0.1)/n and
   ceil((n+1) 0.9)/n, so that with exchangeable errors at least 80% of
   future starts fall inside (and, with many records, not many more).
   The miscoverage level adapts online (adaptive conformal inference, Gibbs &
   Candes 2021): each time a shown interval missed the actual start, alpha
   shrinks by `ACI_STEP` x 0.8, each time it held, alpha grows by `ACI_STEP` x
   0.2, so the long-run share of starts inside tracks 80% even when the
   errors drift with the load (which breaks plain conformal's exchangeability).
4. `arrival_inflation` accounts for work that will arrive ahead of the job:
   with higher-or-equal-rank work arriving at a rate that keeps a share rho of
   the GPUs busy, a wait of w grows to about w / (1 - rho) (a busy period).
   The simulator and the live board apply it before calibrating.

Load is the queue's drain time: waiting GPU-seconds ahead / GPUs, in seconds;
its bucket edges are `LOAD_EDGES_S`; size bucket edges are `SIZE_EDGES_S`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FLOOR_S = 60.0
LOAD_EDGES_S = (600.0, 3600.0, 4 * 3600.0, 16 * 3600.0)
SIZE_EDGES_S = (1800.0, 4 * 3600.0, 24 * 3600.0)
MAX_INFLATION_RHO = 0.9
TARGET_MISS = 0.2  # an 80% interval
ACI_STEP = 0.01
ALPHA_RANGE = (0.02, 0.5)


@dataclass(frozen=True)
class EtaRecord:
    """One past prediction and what happened. Waits are seconds from the prediction."""

    tier: int
    load_s: float
    predicted_s: float
    actual_s: float
    size_s: float = 0.0  # the job's remaining work (GPU-seconds); 0 = unknown


@dataclass(frozen=True)
class Interval:
    """A calibrated wait: median and 80% interval, in seconds from the prediction.
    `records` says how many past predictions it rests on (0: uncalibrated)."""

    wait_s: float
    low_s: float
    high_s: float
    records: int = 0
    scope: str = "none"  # "tier+load+size", "tier+size", "tier", "all" or "none"


def load_bucket(load_s: float) -> int:
    return bisect.bisect_right(LOAD_EDGES_S, max(0.0, load_s))


def size_bucket(size_s: float) -> int:
    return bisect.bisect_right(SIZE_EDGES_S, max(0.0, size_s))


def log_error(record: EtaRecord) -> float:
    return math.log((record.actual_s + FLOOR_S) / (max(record.predicted_s, 0.0) + FLOOR_S))


class Calibrator:
    """Calibration state as plain data: the newest `window` records per (tier, load bucket,
    size bucket). `add` keeps at most `window` per key; `interval` does not change it."""

    def __init__(self, window: int = 400, min_records: int = 20) -> None:
        self.window = window
        self.min_records = min_records
        self._errors: dict[tuple[int, int, int], list[float]] = {}
        self.alpha = TARGET_MISS  # adapted by `observe`

    def observe(self, covered: bool) -> None:
        """A shown interval held (`covered`) or missed: adapt the miscoverage level (ACI)."""
        self.alpha += ACI_STEP * (TARGET_MISS - (0.0 if covered else 1.0))
        self.alpha = min(max(self.alpha, ALPHA_RANGE[0]), ALPHA_RANGE[1])

    def add(self, record: EtaRecord) -> None:
        key = (record.tier, load_bucket(record.load_s), size_bucket(record.size_s))
        errors = self._errors.setdefault(key, [])
        errors.append(log_error(record))
        if len(errors) > self.window:
            del errors[: len(errors) - self.window]

    def errors_for(self, tier: int, load_s: float, size_s: float = 0.0) -> tuple[list[float], str]:
        load, size = load_bucket(load_s), size_bucket(size_s)
        scopes = (("tier+load+size", lambda k: k == (tier, load, size)),
                  ("tier+size", lambda k: k[0] == tier and k[2] == size),
                  ("tier", lambda k: k[0] == tier))
        for scope, match in scopes:
            errors = [e for key, errs in self._errors.items() if match(key) for e in errs]
            if len(errors) >= self.min_records:
                return errors, scope
        return [e for errs in self._errors.values() for e in errs], "all"

    def interval(self, predicted_s: float, low_s: float, high_s: float, tier: int,
                 load_s: float, size_s: float = 0.0) -> Interval:
        errors, scope = self.errors_for(tier, load_s, size_s)
        if len(errors) < self.min_records:
            return Interval(predicted_s, low_s, high_s, 0, "none")
        return apply(predicted_s, errors, scope, self.alpha)


def calibrate(records: Iterable[EtaRecord], tier: int, load_s: float, predicted_s: float,
              low_s: float | None = None, high_s: float | None = None, *, size_s: float = 0.0,
              min_records: int = 20, window: int = 400) -> Interval:
    """The calibrated wait for a prediction of `predicted_s` (tier, load) from past records.
    With fewer than `min_records` usable records, the raw interval comes back unchanged."""
    calibrator = Calibrator(window=window, min_records=min_records)
    for record in records:
        calibrator.add(record)
    low = predicted_s if low_s is None else low_s
    high = predicted_s if high_s is None else high_s
    return calibrator.interval(predicted_s, low, high, tier, load_s, size_s)


def apply(predicted_s: float, errors: Sequence[float], scope: str = "given",
          alpha: float = TARGET_MISS) -> Interval:
    """Shift and widen `predicted_s` by the empirical error quantiles (split conformal, a
    central 1 - alpha interval)."""
    ordered = sorted(errors)
    n = len(ordered)
    lo = ordered[max(0, math.floor((n + 1) * alpha / 2) - 1)]
    hi = ordered[min(n - 1, math.ceil((n + 1) * (1 - alpha / 2)) - 1)]
    mid = _median(ordered)
    base = max(predicted_s, 0.0) + FLOOR_S

    def at(r: float) -> float:
        return max(0.0, base * math.exp(r) - FLOOR_S)

    return Interval(at(mid), at(lo), at(hi), n, scope)


def arrival_inflation(rates_gpu_s_per_s: Mapping[int, float], rank: int, gpus: float) -> float:
    """Factor for a wait of rank `rank`: 1 / (1 - rho), rho = the GPU share that work of
    rank <= `rank` arriving at the observed rates (GPU-seconds per second, by rank)
    keeps busy, capped at `MAX_INFLATION_RHO`."""
    if gpus <= 0:
        return 1.0
    rho = sum(rate for r, rate in rates_gpu_s_per_s.items() if r <= rank) / gpus
    return 1.0 / (1.0 - min(max(rho, 0.0), MAX_INFLATION_RHO))


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

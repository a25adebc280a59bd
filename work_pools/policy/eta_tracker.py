"""Calibrated wait-time estimates over time: what the live board shows and the simulator
scores, from the same object (pure: no I/O, the clock is passed in).

When a job first waits, `arrived` counts its work (for the arrival rates) and `predict`
records its raw forward-run ETA with the features the calibrator uses (tier, load,
arrival factor of work of its rank or more urgent over the last `rate_window_s`). When
the job first starts, `started` turns that prediction into an `EtaRecord` and scores
the interval that was shown (the adaptive level of `Calibrator.observe`). `show` turns
any raw ETA into the calibrated one from the records so far.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from work_pools.policy.calibrate import Calibrator, EtaRecord, arrival_inflation
from work_pools.policy.eta import Eta, estimate
from work_pools.policy.model import Policy, Snapshot


@dataclass(frozen=True)
class Prediction:
    raw: Eta
    calibrated: Eta
    tier: int
    load_s: float
    arrivals: float
    submitted: float
    size_s: float = 0.0


class EtaTracker:
    def __init__(self, policy: Policy, gpus: int, rate_window_s: float = 6 * 3600.0,
                 calibrate: bool = True, inflate: bool = True) -> None:
        self.policy = policy
        self.gpus = gpus
        self.rate_window_s = rate_window_s
        self.calibrate = calibrate
        self.inflate = inflate
        self.calibrator = Calibrator()
        self.arrivals: deque[tuple[float, int, float]] = deque()  # (time, tier, GPU-seconds)
        self.pending: dict[str, Prediction] = {}  # job id -> its first prediction

    def arrived(self, now: float, tier: int, gpu_s: float) -> None:
        self.arrivals.append((now, tier, gpu_s))

    def predict(self, snapshot: Snapshot, now: float, seg_ids: set[str]) -> dict[str, Prediction]:
        """Raw and calibrated ETAs for the segments `seg_ids` (just submitted), recorded
        until their jobs start."""
        segs = {s.id: s for s in snapshot.waiting if s.id in seg_ids}
        raws = estimate(snapshot, self.policy, now, only=seg_ids)
        load, rates = drain_time_s(snapshot), self._rates(now)
        out = {}
        for sid, raw in raws.items():
            if sid not in segs:
                continue
            seg = segs[sid]
            arrivals = self._inflation(rates, int(seg.tier))
            out[sid] = Prediction(raw, self._calibrated(raw, int(seg.tier), load, arrivals, now),
                                  int(seg.tier), load, arrivals, now,
                                  seg.gpus * seg.est_remaining_s)
            self.pending[seg.job_id] = out[sid]
        return out

    def show(self, snapshot: Snapshot, raws: dict[str, Eta], now: float) -> dict[str, Eta]:
        """The calibrated ETA of every waiting segment with a raw one (the board's view)."""
        load, rates = drain_time_s(snapshot), self._rates(now)
        tiers = {s.id: int(s.tier) for s in snapshot.waiting}
        return {sid: self._calibrated(raw, tiers[sid], load,
                                      self._inflation(rates, tiers[sid]), now)
                for sid, raw in raws.items() if sid in tiers}

    def started(self, job_id: str, now: float) -> EtaRecord | None:
        """The job's first start: its record joins the history (returned; None when the
        job had no prediction)."""
        prediction = self.pending.pop(job_id, None)
        if prediction is None:
            return None
        shown = prediction.calibrated
        if shown is not prediction.raw:  # only calibrated intervals steer the level
            self.calibrator.observe(shown.start_low_s - 1 <= now <= shown.start_high_s + 1)
        record = EtaRecord(prediction.tier, prediction.load_s,
                           prediction.raw.start_s - prediction.submitted,
                           now - prediction.submitted, prediction.size_s, prediction.arrivals)
        self.calibrator.add(record)
        return record

    def _calibrated(self, raw: Eta, tier: int, load: float, arrivals: float,
                    now: float) -> Eta:
        if not self.calibrate:
            return raw
        cal = self.calibrator.interval(raw.start_s - now, raw.start_low_s - now,
                                       raw.start_high_s - now, tier, load, arrivals=arrivals)
        if not cal.records:
            return raw
        return Eta(raw.segment_id, raw.position, now + cal.wait_s, now + cal.low_s,
                   now + cal.high_s)

    def _rates(self, now: float) -> dict[int, float]:
        while self.arrivals and self.arrivals[0][0] < now - self.rate_window_s:
            self.arrivals.popleft()
        span = min(self.rate_window_s, max(now - (self.arrivals[0][0] if self.arrivals else now),
                                           1.0))
        rates: dict[int, float] = {}
        for _, tier, gpu_s in self.arrivals:
            rates[tier] = rates.get(tier, 0.0) + gpu_s / span
        return rates

    def _inflation(self, rates: dict[int, float], tier: int) -> float:
        if not self.inflate or self.policy.ordering == "fifo":
            return 1.0  # in submission order nothing that arrives later goes first
        if self.policy.ordering == "las":
            return arrival_inflation({0: sum(rates.values())}, 0, self.gpus)
        return arrival_inflation(rates, tier, self.gpus)


def drain_time_s(snapshot: Snapshot) -> float:
    """Load: waiting GPU-seconds (speed 1.0) over the number of GPUs."""
    gpus = max(1, len(snapshot.gpus))
    return sum(s.gpus * s.est_remaining_s for s in snapshot.waiting) / gpus

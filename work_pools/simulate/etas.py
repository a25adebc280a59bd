"""Wait-time estimates in the simulator, scored as the live board would show them.

At submit, `estimate` gives the raw forward-run ETA; `EtaTracker` calibrates it
with the records of jobs that already started (`work_pools.policy.calibrate`),
using as one feature the arrival factor of work ahead of the job (observed
arrival rates of the last `rate_window_s`): only the past is used, as live.
When a job first starts, its record (tier, load at submit, raw predicted wait,
actual wait, arrival factor) joins the history.
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
        self.pending: dict[str, Prediction] = {}

    def arrived(self, now: float, tier: int, gpu_s: float) -> None:
        self.arrivals.append((now, tier, gpu_s))

    def predict(self, snapshot: Snapshot, now: float, seg_ids: set[str]) -> dict[str, Prediction]:
        """Raw and calibrated ETAs for the segments `seg_ids` (just submitted)."""
        load = drain_time_s(snapshot)
        rates = self._rates(now)
        out = {}
        tiers = {s.id: int(s.tier) for s in snapshot.waiting if s.id in seg_ids}
        sizes = {s.id: s.gpus * s.est_remaining_s for s in snapshot.waiting if s.id in seg_ids}
        for sid, raw in estimate(snapshot, self.policy, now, only=seg_ids).items():
            if sid not in seg_ids:
                continue
            tier, wait = tiers[sid], raw.start_s - now
            arrivals = self._inflation(rates, tier)
            calibrated = raw
            if self.calibrate:
                cal = self.calibrator.interval(wait, raw.start_low_s - now,
                                               raw.start_high_s - now, tier, load,
                                               arrivals=arrivals)
                if cal.records:
                    calibrated = Eta(sid, raw.position, now + cal.wait_s, now + cal.low_s,
                                     now + cal.high_s)
            out[sid] = Prediction(raw, calibrated, tier, load, arrivals, now, sizes[sid])
            self.pending[sid.rsplit("/", 1)[0]] = out[sid]
        return out

    def started(self, job_id: str, now: float) -> None:
        prediction = self.pending.pop(job_id, None)
        if prediction is None:
            return
        shown = prediction.calibrated
        if shown is not prediction.raw:  # only calibrated intervals steer the level
            self.calibrator.observe(shown.start_low_s - 1 <= now <= shown.start_high_s + 1)
        self.calibrator.add(EtaRecord(prediction.tier, prediction.load_s,
                                      prediction.raw.start_s - prediction.submitted,
                                      now - prediction.submitted, prediction.size_s,
                                      prediction.arrivals))

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

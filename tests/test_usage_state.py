"""The usage ledger built from segment run records: charging, decay, quota periods, the 70%
window, and how `schedule` turns it into fair share, quota breaches and yielding."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from work_pools import usage_state as L
from work_pools.inventory import GpuInfo
from work_pools.policy.model import Policy, Quota
from work_pools.scheduling import WorkerPolicy, build_snapshot, schedule, waiting_since
from work_pools.usage import SegmentInterval, ledger_state
from yoloq.domain.tiers import Tier

DAY = 86400.0
MONDAY = 4 * DAY + 7 * DAY * 2900  # a Monday 00:00 UTC (1970-01-05 + whole weeks)
A100 = 2.4  # relative speed, yoloq.gpus


def iv(job: str, team: str, start: float, end: float | None, speed: float = 1.0,
       gpus: int = 1) -> SegmentInterval:
    """One segment run's record: what Prefect holds (start, end, team, GPUs and speed)."""
    return SegmentInterval(f"run-{job}-{start}", job, team, "a", start, end, gpus, speed)


def test_charges_tu_by_gpu_speed_and_count():
    policy = Policy(usage_half_life_s=1e12)
    state = ledger_state([iv("j1", "vision", MONDAY, MONDAY + 3600, A100, gpus=2),
                          iv("j2", "nlp", MONDAY, None)], MONDAY + 3600, policy)
    assert state.usage.decayed_tu["vision"] == pytest.approx(2 * A100 * 3600 / DAY)
    assert state.usage.period_tu["nlp"] == pytest.approx(3600 / DAY)
    assert L.attained_gpu_s(state, "j1") == pytest.approx(2 * 3600)


def test_usage_decays_with_half_life_but_period_spend_does_not():
    policy = Policy(usage_half_life_s=DAY / 2)
    ran = [iv("j", "t", MONDAY, MONDAY + 60)]
    spent = ledger_state(ran, MONDAY + 60, policy).usage
    later = ledger_state(ran, MONDAY + 60 + DAY / 2, policy).usage  # same UTC day
    assert later.decayed_tu["t"] == pytest.approx(spent.decayed_tu["t"] / 2, rel=1e-6)
    assert later.period_tu["t"] == pytest.approx(spent.period_tu["t"])


@pytest.mark.parametrize(("period", "elapsed", "kept"), [
    pytest.param("day", 0.5 * DAY, True, id="day-same-day"),
    pytest.param("day", 1.5 * DAY, False, id="day-next-day"),
    pytest.param("week", 5 * DAY, True, id="week-same-week"),
    pytest.param("week", 8 * DAY, False, id="week-next-monday"),
])
def test_period_spend_restarts_with_the_period(period, elapsed, kept):
    policy = Policy(quotas={"t": Quota(1.0, period)})
    state = ledger_state([iv("j", "t", MONDAY, MONDAY + 600)], MONDAY + elapsed, policy)
    assert (L.period_spend(state, MONDAY + elapsed, policy).get("t", 0.0) > 0) is kept


def test_held_window_counts_only_the_rolling_window():
    policy = Policy(long_job_window_s=4 * 3600)
    ran = [iv("j", "t", 0.0, 3 * 3600)]  # ran 0h-3h
    state = ledger_state(ran, 5 * 3600, policy)  # idle 3h-5h
    assert L.held_window_s(state, "j", 5 * 3600, policy.long_job_window_s) == pytest.approx(2 * 3600)
    assert L.held_window_s(ledger_state(ran, 8 * 3600, policy), "j", 8 * 3600,
                           policy.long_job_window_s) == 0.0
    assert L.last_held_at(state, "j") == 3 * 3600


def test_waiting_since_counts_continuous_waiting_only():
    assert waiting_since(100.0, None) == 100.0
    assert waiting_since(100.0, 5000.0) == 5000.0


# -- the ledger in the worker's snapshot ----------------------------------------------

@dataclass(frozen=True)
class _View:
    """The SegmentView fields scheduling reads."""

    flow_run_id: uuid.UUID
    job_id: str
    team: str
    tier: Tier = Tier.NORMAL
    job_class: str = "full"
    est_mem_gb: float = 4.0
    est_epoch_s: float = 60.0
    epochs: int = 10
    epochs_done: int = 0
    queued_at: float = 0.0
    submitted_at: float | None = None
    name: str = "seg"
    labels: dict[str, str] = field(default_factory=dict)
    batch: int = 16
    fixed_mem_gb: float = 0.0
    mem_per_image_gb: float = 0.0

    @property
    def progress_epoch(self) -> int:
        return self.epochs_done

    @property
    def checkpoint_at(self) -> float | None:
        return None


def _slot() -> list[GpuInfo]:
    return [GpuInfo(0, "declared-0", "declared CPU slot", 8, 8, kind="declared")]


def test_snapshot_carries_usage_period_spend_and_job_history():
    policy = Policy(long_job_window_s=4 * 3600, quotas={"vision": Quota(0.5)})
    state = ledger_state([iv("long", "vision", MONDAY, MONDAY + 3 * 3600, 100.0)],
                         MONDAY + 3 * 3600, policy)
    waiting = _View(uuid.uuid4(), "long", "vision", queued_at=MONDAY + 3 * 3600,
                    submitted_at=MONDAY - 60)
    snap = build_snapshot(_slot(), [], [waiting], {}, {}, set(), {}, ledger=state,
                          now=MONDAY + 3 * 3600, policy=policy)
    seg = snap.waiting[0]
    assert seg.held_window_s == pytest.approx(3 * 3600)
    assert seg.attained_gpu_s == pytest.approx(3 * 3600)
    assert seg.submitted_at == MONDAY - 60
    assert seg.waiting_since == MONDAY + 3 * 3600  # it last held a GPU just now
    assert snap.team_period_tu["vision"] == pytest.approx(100 * 3 * 3600 / DAY)


def test_schedule_reports_the_quota_breach_and_the_long_job_yields():
    policy = Policy(quotas={"vision": Quota(0.5)}, long_job_window_s=4 * 3600)
    now = MONDAY + 3 * 3600
    state = ledger_state([iv("long", "nlp", MONDAY, now, 1.0), iv("vis", "vision", MONDAY, now, 10.0)],
                         now, policy)
    long_job = _View(uuid.uuid4(), "long", "nlp", queued_at=now - 1)
    short_job = _View(uuid.uuid4(), "short", "nlp", job_class="short", queued_at=now)
    decision = schedule(_slot(), [], [long_job, short_job], {}, {}, now,
                        WorkerPolicy(policy=policy), ledger=state)
    assert [a.flow_run_id for a in decision.admit] == [short_job.flow_run_id]
    assert "yielding to short experiments" in decision.waiting[long_job.flow_run_id]
    assert [(b.team, b.period) for b in decision.raw.quota_breaches] == [("vision", "day")]

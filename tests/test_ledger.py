"""The worker's usage ledger: charging, decay, quota periods, the 70% window, persistence,
and how `schedule` turns it into fair share, quota breaches and yielding."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest

from work_pools import ledger as L
from work_pools.inventory import GpuInfo
from work_pools.policy.model import Policy, Quota
from work_pools.scheduling import WorkerPolicy, build_snapshot, schedule, waiting_since
from yoloq.tiers import Tier

DAY = 86400.0
MONDAY = 4 * DAY + 7 * DAY * 2900  # a Monday 00:00 UTC (1970-01-05 + whole weeks)
A100 = 2.4  # relative speed, yoloq.gpus


def charge_for(job: str, team: str, started: float, *speeds: float) -> L.RunningCharge:
    return L.RunningCharge(job, team, started, tuple(speeds) or (1.0,))


def test_charges_tu_by_gpu_speed_and_count():
    policy = Policy(usage_half_life_s=1e12)
    state = L.record(L.LedgerState(), [], MONDAY, policy)
    state = L.record(state, [charge_for("j1", "vision", MONDAY, A100, A100),
                             charge_for("j2", "nlp", MONDAY, 1.0)], MONDAY + 3600, policy)
    assert state.usage.decayed_tu["vision"] == pytest.approx(2 * A100 * 3600 / DAY)
    assert state.usage.period_tu["nlp"] == pytest.approx(3600 / DAY)
    assert L.attained_gpu_s(state, "j1") == pytest.approx(2 * 3600)


def test_charges_only_since_the_later_of_last_poll_and_start():
    policy = Policy()
    state = L.record(L.LedgerState(), [], 1000.0, policy)
    state = L.record(state, [charge_for("j", "t", 1500.0)], 2000.0, policy)  # started mid-poll
    assert L.attained_gpu_s(state, "j") == pytest.approx(500.0)
    state = L.record(state, [charge_for("j", "t", 1500.0)], 2600.0, policy)
    assert L.attained_gpu_s(state, "j") == pytest.approx(1100.0)
    assert state.jobs["j"].held == ((1500.0, 2600.0),)  # contiguous polls merge


def test_usage_decays_with_half_life_but_period_spend_does_not():
    policy = Policy(usage_half_life_s=DAY / 2)
    state = L.record(L.LedgerState(), [], MONDAY, policy)
    state = L.record(state, [charge_for("j", "t", MONDAY)], MONDAY + 3600, policy)
    spent = state.usage.period_tu["t"]
    later = L.record(state, [], MONDAY + 3600 + DAY / 2, policy)  # same UTC day
    assert later.usage.decayed_tu["t"] == pytest.approx(spent / 2)
    assert later.usage.period_tu["t"] == pytest.approx(spent)


@pytest.mark.parametrize(("period", "elapsed", "kept"), [
    pytest.param("day", 0.5 * DAY, True, id="day-same-day"),
    pytest.param("day", 1.5 * DAY, False, id="day-next-day"),
    pytest.param("week", 5 * DAY, True, id="week-same-week"),
    pytest.param("week", 8 * DAY, False, id="week-next-monday"),
])
def test_period_spend_restarts_with_the_period(period, elapsed, kept):
    policy = Policy(quotas={"t": Quota(1.0, period)})
    state = L.record(L.LedgerState(), [], MONDAY, policy)
    state = L.record(state, [charge_for("j", "t", MONDAY)], MONDAY + 600, policy)
    assert (L.period_spend(state, MONDAY + elapsed, policy).get("t", 0.0) > 0) is kept
    rolled = L.record(state, [], MONDAY + elapsed, policy)
    assert (rolled.usage.period_tu.get("t", 0.0) > 0) is kept


def test_held_window_counts_only_the_rolling_window():
    policy = Policy(long_job_window_s=4 * 3600)
    state = L.record(L.LedgerState(), [], 0.0, policy)
    state = L.record(state, [charge_for("j", "t", 0.0)], 3 * 3600, policy)  # ran 0h-3h
    state = L.record(state, [], 5 * 3600, policy)  # idle 3h-5h
    assert L.held_window_s(state, "j", 5 * 3600, policy.long_job_window_s) == pytest.approx(2 * 3600)
    assert L.held_window_s(state, "j", 8 * 3600, policy.long_job_window_s) == 0.0
    assert L.last_held_at(state, "j") == 3 * 3600


def test_waiting_since_counts_continuous_waiting_only():
    assert waiting_since(100.0, None) == 100.0
    assert waiting_since(100.0, 5000.0) == 5000.0


def test_persisted_ledger_survives_a_restart(tmp_path):
    path = tmp_path / "ledger.json"
    keeper = L.UsageKeeper(Policy(), path)
    gpu = GpuInfo(0, "GPU-0", "NVIDIA A100-SXM4-80GB", 80, 80)
    view = _View(uuid.uuid4(), "job-1", "vision")
    keeper.charge_running([view], {view.flow_run_id: (0,)}, {view.flow_run_id: 0.0}, [gpu], 0.0)
    keeper.charge_running([view], {view.flow_run_id: (0,)}, {view.flow_run_id: 0.0}, [gpu], 600.0)
    keeper.mark_notified(["vision:day:1970-01-01"], 600.0)
    reopened = L.UsageKeeper(Policy(), path)
    assert reopened.state == keeper.state
    assert reopened.state.usage.decayed_tu["vision"] == pytest.approx(A100 * 600 / DAY)
    assert "vision:day:1970-01-01" in reopened.state.notified
    assert json.loads(path.read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]  # no temp files left


def test_unreadable_ledger_starts_empty(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text("{not json")
    assert L.UsageKeeper(Policy(), path).state == L.LedgerState()


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
    state = L.record(L.LedgerState(), [], MONDAY, policy)
    state = L.record(state, [charge_for("long", "vision", MONDAY, 100.0)], MONDAY + 3 * 3600, policy)
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
    state = L.record(L.LedgerState(), [], MONDAY, policy)
    state = L.record(state, [charge_for("long", "nlp", MONDAY, 1.0),
                             charge_for("vis", "vision", MONDAY, 10.0)], now, policy)
    long_job = _View(uuid.uuid4(), "long", "nlp", queued_at=now - 1)
    short_job = _View(uuid.uuid4(), "short", "nlp", job_class="short", queued_at=now)
    decision = schedule(_slot(), [], [long_job, short_job], {}, {}, now,
                        WorkerPolicy(policy=policy), ledger=state)
    assert [a.flow_run_id for a in decision.admit] == [short_job.flow_run_id]
    assert "yielding to short experiments" in decision.waiting[long_job.flow_run_id]
    assert [(b.team, b.period) for b in decision.raw.quota_breaches] == [("vision", "day")]

"""Usage from Prefect's run records, the pool's flat GPU index, and node records (pure)."""

from __future__ import annotations

import math

import pytest

from work_pools.inventory import GpuInfo
from work_pools.nodes import NodeRecord, from_value, to_value, validate_node_name
from work_pools.policy.model import Policy, Quota
from work_pools.pool_scheduler import PoolGpus
from work_pools.usage import SegmentInterval, decayed_tu, ledger_state, usage_table
from yoloq.base.errors import UserError
from yoloq.domain.gpus import TU_SECONDS

DAY = 86400.0
NOW = 20 * DAY + 3600.0  # 01:00 UTC


def iv(run: str, job: str, team: str, start: float, end: float | None, gpus: int = 1,
       speed: float = 1.0, node: str = "a") -> SegmentInterval:
    return SegmentInterval(run, job, team, node, start, end, gpus, speed)


def test_raw_training_units_are_gpu_seconds_times_speed():
    rows = usage_table([iv("r1", "j1", "vision", NOW - 600, NOW - 300, gpus=2, speed=2.0),
                        iv("r2", "j1", "vision", NOW - 200, None, speed=2.0),
                        iv("r3", "j2", "audio", NOW - 100, NOW - 40)], NOW, NOW - DAY)
    by_job = {r["job"]: r for r in rows}
    assert by_job["j1"]["gpu_s"] == pytest.approx(2 * 300 + 200)
    assert by_job["j1"]["tu"] == pytest.approx(2.0 * (2 * 300 + 200) / TU_SECONDS)
    assert by_job["j1"]["segments"] == 2 and by_job["j2"]["gpu_s"] == pytest.approx(60)


def test_usage_window_clips_intervals_and_filters_teams():
    rows = usage_table([iv("r1", "j1", "vision", NOW - 1000, NOW - 400)], NOW, NOW - 500)
    assert rows[0]["gpu_s"] == pytest.approx(100)
    assert usage_table([iv("r1", "j1", "vision", NOW - 1000, NOW - 400)], NOW, NOW - 500,
                       team="audio") == []


def test_decayed_usage_is_the_exact_integral_of_the_half_life():
    policy = Policy(usage_half_life_s=3600.0)
    one = iv("r", "j", "t", NOW - 7200, NOW - 3600)
    steps = 20000
    dt = 3600.0 / steps
    numeric = sum(dt / TU_SECONDS * 0.5 ** ((NOW - (NOW - 7200 + (i + 0.5) * dt)) / 3600.0)
                  for i in range(steps))
    assert decayed_tu(one, one.end, NOW, policy) == pytest.approx(numeric, rel=1e-6)
    # an hour-old hour is worth between a quarter and a half of a fresh hour
    fresh = 3600.0 / TU_SECONDS
    assert 0.25 * fresh < numeric < 0.5 * fresh


def test_quota_spend_counts_only_the_current_period():
    policy = Policy(quotas={"vision": Quota(tu=1.0, period="day")})
    crossing = iv("r", "j", "vision", NOW - 2 * 3600, NOW - 1800)  # 23:00 -> 00:30
    state = ledger_state([crossing], NOW, policy)
    assert state.usage.period_tu["vision"] == pytest.approx(1800 / TU_SECONDS)
    assert state.jobs["j"].attained_gpu_s == pytest.approx(5400)


def test_open_runs_are_charged_up_to_now_and_holding_intervals_merge():
    policy = Policy(long_job_window_s=4 * 3600)
    state = ledger_state([iv("r1", "j", "t", NOW - 900, NOW - 600),
                          iv("r2", "j", "t", NOW - 600, None)], NOW, policy)
    assert state.jobs["j"].held == ((NOW - 900, NOW),)
    assert state.jobs["j"].attained_gpu_s == pytest.approx(900)
    assert state.usage.decayed_tu["t"] > 0


def test_a_restarted_scheduler_gets_the_same_numbers():
    """Nothing is kept between passes but the runs: the same records give the same ledger."""
    records = [iv(f"r{i}", f"j{i % 3}", f"team{i % 2}", NOW - 5000 + 100 * i, NOW - 4000 + 90 * i)
               for i in range(12)]
    policy = Policy(quotas={"team0": Quota(tu=0.01)})
    first, again = ledger_state(records, NOW, policy), ledger_state(list(reversed(records)), NOW, policy)
    assert first.usage.decayed_tu == pytest.approx(again.usage.decayed_tu)
    assert first.usage.period_tu == pytest.approx(again.usage.period_tu)
    assert {k: v.attained_gpu_s for k, v in first.jobs.items()} == pytest.approx(
        {k: v.attained_gpu_s for k, v in again.jobs.items()})


def _gpu(i: int, name: str = "declared CPU slot", mem: float = 8.0) -> GpuInfo:
    return GpuInfo(index=i, uuid=f"u{i}", name=name, mem_total_gb=mem, mem_free_gb=mem, kind="declared")


def test_pool_gpus_number_node_by_node_and_map_back():
    nodes = [NodeRecord("b", (_gpu(0), _gpu(1)), NOW), NodeRecord("a", (_gpu(0),), NOW)]
    pool = PoolGpus.of(nodes)
    assert [g.index for g in pool.gpus] == [0, 1, 2]
    assert pool.where == {0: ("a", 0), 1: ("b", 0), 2: ("b", 1)}
    assert pool.node_of((1, 2)) == ("b", (0, 1))
    with pytest.raises(ValueError, match="span nodes"):
        pool.node_of((0, 1))


def test_node_records_round_trip_and_go_stale():
    record = NodeRecord("gpu-a", (_gpu(0, "A100-80GB", 80.0),), NOW, ("run-1",), "host", 42)
    back = from_value(to_value(record))
    assert back is not None and back.name == "gpu-a" and back.live_runs == ("run-1",)
    assert back.gpus[0].mem_total_gb == 80.0 and back.gpus[0].name == "A100-80GB"
    assert back.alive(NOW + 10, timeout_s=30) and not back.alive(NOW + 31, timeout_s=30)
    assert from_value({"unrelated": 1}) is None and from_value("text") is None


@pytest.mark.parametrize("name", ["Node A", "a/b", "", "-x", "a" * 64])
def test_bad_node_names_are_one_line_errors(name):
    with pytest.raises(UserError, match="--name"):
        validate_node_name(name)


def test_usage_rate_matches_tu_definition():
    assert math.isclose(iv("r", "j", "t", 0, TU_SECONDS).tu(TU_SECONDS), 1.0)


def _view(epochs_done: int, labels: dict[str, str], est_epoch_s: float = 30.0):
    import uuid

    from work_pools.segments import SegmentView
    from yoloq.domain.tiers import Tier

    return SegmentView(uuid.uuid4(), "seg", "job", "team", Tier.LOW, "full", 1.0, est_epoch_s, 6,
                       epochs_done, 6, 0.0, labels)


def test_grace_uses_the_measured_epoch_time_on_this_gpu():
    from work_pools.scheduling import WorkerPolicy, epoch_time_here

    policy = WorkerPolicy(min_grace_s=60.0, grace_epochs=2.0)
    # resumed at epoch 2, two epochs done here in 400 s: 200 s per epoch, grace 400 s
    measured = epoch_time_here(1000.0, _view(2, {"yoloq.epoch": "4", "yoloq.checkpoint_at": "1400"}), 1.0)
    assert measured == pytest.approx(200.0) and policy.grace_for(measured) == pytest.approx(400.0)
    # before its first epoch: the V100 estimate scaled to a slow slot (speed 0.01) -> 3000 s
    assert epoch_time_here(1000.0, _view(2, {}), 0.01) == pytest.approx(3000.0)
    assert epoch_time_here(None, _view(0, {}), 2.0) == pytest.approx(15.0)


def test_running_segments_carry_their_uninterrupted_hold_and_measured_epoch_time():
    """A job whose next segment started 20 s after the last one ended held its GPU throughout
    (min runtime counts from the first); its epoch time is measured, at speed 1.0."""
    from work_pools.scheduling import build_snapshot

    policy = Policy(long_job_window_s=4 * 3600)
    history = ledger_state([iv("r1", "job", "team", NOW - 1000, NOW - 420),
                            iv("r2", "job", "team", NOW - 400, None)], NOW, policy)
    view = _view(2, {"yoloq.epoch": "4", "yoloq.checkpoint_at": str(NOW - 100)})
    gpu = GpuInfo(index=0, uuid="u", name="NVIDIA A100-SXM4-80GB", mem_total_gb=80,
                  mem_free_gb=80, kind="nvml")
    snap = build_snapshot([gpu], [view], [], {view.flow_run_id: (0,)}, {view.flow_run_id: NOW - 400},
                          set(), {}, ledger=history, now=NOW, policy=policy)
    seg = snap.running[0]
    assert seg.held_since == NOW - 1000
    speed = snap.gpus[0].speed
    assert seg.measured_epoch_s == pytest.approx((300 / 2) * speed)


def test_a_running_segment_asked_to_stop_carries_the_job_it_stops_for():
    """The next pass keeps a victim for its preemptor: `yoloq.preempted_by` reaches `decide`."""
    from work_pools.scheduling import build_snapshot

    gpu = GpuInfo(index=0, uuid="u", name="CPU", mem_total_gb=8, mem_free_gb=8, kind="declared")
    asked = _view(0, {"yoloq.preempt": "requested", "yoloq.preempted_by": "job-p"})
    done = _view(0, {"yoloq.preempted_by": "job-p"})  # label left over, not asked again: ignored
    on_gpu = {asked.flow_run_id: (0,), done.flow_run_id: (0,)}
    snap = build_snapshot([gpu], [asked, done], [], on_gpu, {}, {asked.flow_run_id}, {})
    assert [(s.stopping, s.stopping_for) for s in snap.running] == [(True, "job-p"), (False, "")]


def test_a_segment_past_its_last_epoch_frees_its_gpu_and_is_asked_nothing():
    """A running segment that checkpointed its last epoch (finalising, or its process exiting)
    counts as stopping for nobody: an urgent job waits for that GPU instead of preempting a
    second segment (the load test's 14 preemptions for 13 preemptors), and the board says so."""
    from dataclasses import replace

    from work_pools.board import _running_row
    from work_pools.scheduling import WorkerPolicy, schedule
    from yoloq.domain.tiers import Tier

    gpus = [GpuInfo(index=i, uuid=f"u{i}", name="CPU", mem_total_gb=8, mem_free_gb=8, kind="declared")
            for i in (0, 1)]
    finishing = replace(_view(0, {"yoloq.epoch": "6"}), job_id="finishing")  # epochs 0 -> 6 of 6
    training = replace(_view(0, {"yoloq.epoch": "2"}), job_id="training")
    urgent = replace(_view(0, {}), job_id="urgent", tier=Tier.URGENT)
    on_gpu = {finishing.flow_run_id: (0,), training.flow_run_id: (1,)}
    started = {v.flow_run_id: NOW - 600 for v in (finishing, training)}
    decision = schedule(gpus, [finishing, training], [urgent], on_gpu, started, NOW,
                        WorkerPolicy(policy=Policy(min_runtime_s=0.0)))
    assert decision.preempt == ()
    assert "frees when job finishing stops" in decision.waiting[urgent.flow_run_id]
    seg = next(s for s in decision.snapshot.running if s.job_id == "finishing")
    assert (seg.stopping, seg.stopping_for) == (True, "")
    assert _running_row(seg, finishing, decision.raw)["reason"] == "finishing: its last epoch is done"

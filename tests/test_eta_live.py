"""Calibrated ETAs live (issue 13 item 3): the leader's board records each job's first
prediction and its actual start, calibrates from them, keeps them in the
`yoloq-eta-history` artifact, and `yoloq queue` shows the calibrated interval."""

from __future__ import annotations

import time
import uuid

import pytest
from test_board import (  # noqa: F401
    NOW,
    FakeWorker,
    _yoloq_queue_json,
    decide_for,
    future_segments,
    prefect_api,
    publish,
    read_history,
    view,
)

from work_pools import board
from work_pools.policy.calibrate import FLOOR_S


def _history(worker: FakeWorker, jobs: int, start: float, ratio: float = 2.0) -> float:
    """`jobs` jobs each wait behind a busy job and start `ratio` times later than the
    forward run said (floor included); returns the clock after the last start."""
    t = start
    for n in range(jobs):
        busy, waiting = view(f"busy{n}.s1", est_mem_gb=60), view(f"job{n}.s1", est_mem_gb=60)
        worker._running = [busy]
        rows = board.board_rows(worker, decide_for(worker, [waiting], t), t)
        raw_wait = next(r for r in rows if r["segment"] == waiting.name)["eta_s"] - t
        t += (raw_wait + FLOOR_S) * ratio - FLOOR_S
        worker._running = [waiting]
        board.board_rows(worker, decide_for(worker, [], t), t)
        t += 3600
    return t


def test_board_records_starts_and_shows_the_calibrated_interval():
    worker = FakeWorker([])
    t = _history(worker, 9, NOW)
    tracker = board._trackers[worker.name]
    assert len(tracker.calibrator) == 9 and not tracker.pending
    busy, waiting = view("busy.s1", est_mem_gb=60), view("next.s1", est_mem_gb=60)
    worker._running = [busy]
    row = board.board_rows(worker, decide_for(worker, [waiting], t), t)[1]
    assert row["eta_basis"] == "forward run"  # 9 starts: too few to calibrate
    raw_wait = row["eta_s"] - t
    t = _history(worker, 1, t)  # the 10th start
    worker._running = [busy]
    row = board.board_rows(worker, decide_for(worker, [waiting], t), t)[1]
    assert row["eta_basis"] == "calibrated"
    assert row["eta_s"] - t == pytest.approx((raw_wait + FLOOR_S) * 2 - FLOOR_S, abs=60)
    assert row["eta_low"] <= row["eta_s"] <= row["eta_high"]


def test_a_cancelled_job_leaves_no_record():
    worker = FakeWorker([view("busy.s1", est_mem_gb=60)])
    waiting = view("gone.s1", est_mem_gb=60)
    board.board_rows(worker, decide_for(worker, [waiting], NOW), NOW)
    assert "gone" in board._trackers[worker.name].pending
    board.board_rows(worker, decide_for(worker, [], NOW + 60), NOW + 60)
    assert not board._trackers[worker.name].pending
    assert len(board._trackers[worker.name].calibrator) == 0


@pytest.mark.service
def test_history_survives_a_new_leader_and_queue_shows_the_basis(future_segments,  # noqa: F811
                                                                 capsys):
    """Published through the real server: the history artifact holds the records, a new
    leader (fresh trackers) restores them, and `yoloq queue --json` carries `eta_basis`."""
    from work_pools.segments import segment_view

    worker = FakeWorker([])
    _history(worker, 10, time.time() - 30 * 86400)
    worker._running = [view(f"someone-{uuid.uuid4().hex[:4]}.s1", est_mem_gb=60)]
    pending = [segment_view(run) for run in future_segments]
    now = time.time()
    assert publish(worker, decide_for(worker, pending, now), now)
    saved = read_history()
    assert len(saved) >= 10 and {"predicted_s", "actual_s", "tier"} <= saved[-1].keys()

    board._trackers.clear()  # a new leader: nothing in memory
    fresh = FakeWorker(worker._running, name=f"new-leader-{uuid.uuid4().hex[:4]}")
    decision = decide_for(fresh, pending, now + 120)
    publish(fresh, decision, now + 120)
    assert len(board._trackers[fresh.name].calibrator) >= 10
    names = {run.name for run in future_segments}
    shown = [r for r in _yoloq_queue_json(capsys) if r["segment"] in names]
    assert shown and all(r["eta_basis"] == "calibrated" for r in shown)

"""The queue board: rows from real scheduling decisions, ETAs with an 80% interval,
publish-on-change, and read back from the real Prefect server and `yoloq queue --json`."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from work_pools import board
from work_pools.inventory import GpuInfo
from work_pools.policy.model import Policy
from work_pools.scheduling import WorkerPolicy, schedule
from yoloq.domain.tiers import Tier

NOW = 1_800_000_000.0


@dataclass(frozen=True)
class View:
    """The SegmentView fields the worker's scheduling and the board read."""

    flow_run_id: uuid.UUID
    name: str
    job_id: str
    team: str = "vision"
    tier: Tier = Tier.NORMAL
    job_class: str = "full"
    est_mem_gb: float = 6.0
    est_epoch_s: float = 120.0
    epochs: int = 5
    epochs_done: int = 0
    stop_after_epoch: int = 5
    queued_at: float = NOW - 60
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


class FakeWorker:
    """What `publish_if_changed` reads from the yolo-gpu worker."""

    def __init__(self, running: list[View], name: str = "") -> None:
        self.name = name or f"test-worker-{uuid.uuid4().hex[:6]}"
        self._running = running
        self._policy = WorkerPolicy(policy=Policy(min_runtime_s=3600))  # no preemption here

    def _running_views(self) -> list[View]:
        return list(self._running)


def view(name: str, **kw: Any) -> View:
    return View(uuid.uuid4(), name, name.split(".")[0], **kw)


def one_slot() -> list[GpuInfo]:
    return [GpuInfo(0, "GPU-0", "NVIDIA A100-SXM4-80GB", 80, 80)]


def decide_for(worker: FakeWorker, pending: list[View], now: float = NOW):
    running = worker._running_views()
    reserved = {v.flow_run_id: (0,) for v in running}
    started = {v.flow_run_id: now - 60 for v in running}  # its 600 s time slice ends in 9 min
    return schedule(one_slot(), running, pending, reserved, started, now, worker._policy)


def test_rows_show_running_then_waiting_in_policy_order_with_etas():
    # 5 epochs x 120 s on a speed-2.4 GPU: each job holds the slot 250 s (median)
    busy = view("busy.s1", est_mem_gb=60)
    worker = FakeWorker([busy])
    low, urgent = view("low.s1", tier=Tier.LOW, est_mem_gb=60), view("urgent.s1", tier=Tier.URGENT,
                                                                      est_mem_gb=60)
    decision = decide_for(worker, [low, urgent])
    rows = board.board_rows(worker, decision, NOW)
    assert [(r["segment"], r["state"], r["position"]) for r in rows] == [
        ("busy.s1", "running", 0), ("urgent.s1", "waiting", 1), ("low.s1", "waiting", 2)]
    urgent_row, low_row = rows[1], rows[2]
    assert urgent_row["tier"] == "urgent" and urgent_row["team"] == "vision"
    assert urgent_row["eta_low"] <= urgent_row["eta_s"] <= urgent_row["eta_high"]
    assert low_row["eta_s"] > urgent_row["eta_s"]  # queued behind urgent
    assert urgent_row["eta"].startswith("in ") and "(" in urgent_row["eta"]
    assert all(r["reason"].startswith("waiting") for r in rows[1:])
    json.dumps(rows)  # a table artifact holds plain JSON


def test_admitted_segments_show_as_running():
    worker = FakeWorker([])
    first = view("first.s1", est_mem_gb=60)
    decision = decide_for(worker, [first])
    rows = board.board_rows(worker, decision, NOW)
    assert [(r["segment"], r["state"], r["gpus"]) for r in rows] == [("first.s1", "running", "0")]
    assert rows[0]["reason"] == "running"


@pytest.mark.parametrize(("mid", "low", "high", "text"), [
    pytest.param(10, 0, 30, "now", id="within-a-minute"),
    pytest.param(300, 180, 540, "in 5m (3m-9m)", id="minutes"),
    pytest.param(3 * 3600, 2 * 3600, 5 * 3600, "in 3.0h (2.0h-5.0h)", id="hours"),
    pytest.param(3 * 86400, 2 * 86400, 4 * 86400, "in 3.0d (2.0d-4.0d)", id="days"),
])
def test_eta_text(mid, low, high, text):
    assert board.eta_text(mid, low, high) == text


def test_eta_is_rounded_so_small_moves_do_not_republish():
    busy = view("busy.s1", est_mem_gb=60)
    worker = FakeWorker([busy])
    waiting = view("w.s1", est_mem_gb=60)
    rows_now = board.board_rows(worker, decide_for(worker, [waiting]), NOW)
    rows_later = board.board_rows(worker, decide_for(worker, [waiting], NOW + 1), NOW + 1)
    assert rows_now == rows_later


@pytest.mark.parametrize(("last", "new", "publish"), [
    pytest.param(None, ("rows", "rows+text", 0.0), True, id="first-board"),
    pytest.param(("rows", "rows+text", 0.0), ("other", "other+text", 1.0), True, id="rows-changed"),
    pytest.param(("rows", "rows+text", 0.0), ("rows", "rows+text", 500.0), False, id="unchanged"),
    pytest.param(("rows", "rows+text", 0.0), ("rows", "rows+newtext", 30.0), False,
                 id="text-only-within-a-minute"),
    pytest.param(("rows", "rows+text", 0.0), ("rows", "rows+newtext", 60.0), True,
                 id="text-only-after-a-minute"),
])
def test_publish_only_on_change(last, new, publish):
    assert board.should_publish(last, new) is publish


# -- against the real Prefect server ----------------------------------------------------

@pytest.fixture
def prefect_api(yoloq_stack):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: yoloq_stack.api_url}):
        yield yoloq_stack


@pytest.fixture
def future_segments(prefect_api):
    """Two real `train-segment` flow runs, scheduled a day ahead so no worker starts them."""
    from datetime import datetime, timedelta, timezone

    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from yoloq.base.names import SEGMENT_DEPLOYMENT

    tag = uuid.uuid4().hex[:6]
    runs = []
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(SEGMENT_DEPLOYMENT)
        for job, tier in ((f"board-low-{tag}", "low"), (f"board-high-{tag}", "high")):
            when = datetime.now(timezone.utc) + timedelta(days=1)
            runs.append(client.create_flow_run_from_deployment(
                deployment.id, name=f"{job}.s1.e0-2", work_queue_name=tier,
                state=Scheduled(scheduled_time=when), tags=[f"job:{job}", "yoloq"],
                parameters={"job_id": job, "stop_after_epoch": 2,
                            "spec": {"team": "vision", "priority": tier, "epochs": 4},
                            "plan": {"team": "vision", "tier": tier, "est_mem_gb": 60,
                                     "est_epoch_s": 100, "epochs": 4, "epochs_done": 0}}))
        yield runs
        for run in runs:
            client.delete_flow_run(run.id)


def publish(worker, decision, now: float) -> bool:
    """`board.publish_if_changed` through one real client, as the worker passes its own."""
    from prefect.client.orchestration import get_client

    async def go() -> bool:
        async with get_client() as client:
            return await board.publish_if_changed(client, worker, decision, now)

    return asyncio.run(go())


def read_history() -> list[dict[str, Any]]:
    from prefect.client.orchestration import get_client

    async def go() -> list[dict[str, Any]]:
        async with get_client() as client:
            return await board._read_history(client)

    return asyncio.run(go())


@pytest.mark.service
def test_board_is_published_on_change_and_read_by_yoloq_queue(future_segments, capsys):
    from work_pools.segments import segment_view

    pending = [segment_view(run) for run in future_segments]
    worker = FakeWorker([view("someone-else.s1", est_mem_gb=60)])
    now = time.time()
    decision = decide_for(worker, pending, now)
    assert publish(worker, decision, now) is True
    # unchanged -> not republished (1-second drift is covered by the pure rounding test,
    # whose fixed clock avoids a minute boundary between the two calls)
    assert publish(worker, decision, now) is False

    # The stack's own leader publishes its board too (without these runs: they are not due
    # for a day), so this test's board is found by its worker's name, and `yoloq queue` is
    # compared with this test's board while that board is the latest.
    published = _board_rows_of(worker.name)
    names = {run.name for run in future_segments}
    mine = {r["segment"]: r for r in published if r.get("segment") in names}
    high, low = (next(r for r in mine.values() if r["tier"] == t) for t in ("high", "low"))
    assert (high["position"], low["position"]) == (1, 2)
    assert high["eta_low"] <= high["eta_s"] <= high["eta_high"] < low["eta_high"]

    queue, latest = _queue_while_latest_board_is(worker, decision, capsys)
    shown = {r["segment"]: r for r in queue if r["segment"] in names}
    board_rows = {r["segment"]: r for r in latest if r.get("segment") in names}
    for key in ("eta", "eta_low", "reason"):
        assert {n: shown[n][key] for n in names} == {n: board_rows[n][key] for n in names}, key
    assert shown[high["segment"]]["position"] < shown[low["segment"]]["position"]


def _board_rows_of(worker_name: str) -> list[dict[str, Any]]:
    """The rows of the newest board that worker published."""
    for art in _board_artifacts(10):
        if f"worker {worker_name}:" in (art.description or ""):
            return json.loads(art.data) if isinstance(art.data, str) else art.data
    raise AssertionError(f"no board published by {worker_name}")


def _queue_while_latest_board_is(worker, decision, capsys
                                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`yoloq queue --json` read while this worker's board is the newest one (republished
    first, since the stack's own leader may publish in between)."""
    for _ in range(10):
        board._last.pop(worker.name, None)
        assert publish(worker, decision, time.time()) is True
        before = _board_artifacts(1)[0]
        queue = _yoloq_queue_json(capsys)
        if f"worker {worker.name}:" in (before.description or "") and \
                _board_artifacts(1)[0].id == before.id:
            data = before.data
            return queue, json.loads(data) if isinstance(data, str) else data
    raise AssertionError("another board was published during every read of `yoloq queue`")


def _board_artifacts(limit: int) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            any_=[board.BOARD_KEY])), sort=ArtifactSort.CREATED_DESC, limit=limit)


def _yoloq_queue_json(capsys) -> list[dict[str, Any]]:
    from yoloq.cli import main

    capsys.readouterr()
    assert main(["queue", "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # JSON Lines

"""The yolo-gpu worker on the real stack with real training: tier order, no thrash,
grace kill of a stuck victim, and recovery after the worker is SIGKILLed."""

from __future__ import annotations

import json
import time

import pytest

from stack_helpers import freeze, thaw, wait_final, worker_with, write_spec, yoloq

pytestmark = [pytest.mark.service, pytest.mark.training]


def submit(spec) -> str:
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def wait_for(predicate, what: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def running_epoch(job_id: str) -> int | None:
    """The epoch last checkpointed by the job's running segment, or None if not running."""
    for seg in segments(job_id):
        if seg.state and seg.state.is_running():
            return int((seg.labels or {}).get("yoloq.epoch", 0))
    return None


@pytest.fixture(scope="module")
def long_epochs_dataset(session_dir):
    """Epochs of several seconds on this CPU, so a job can be caught inside one."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(session_dir / "shapes160", train=160, val=8, imgsz=64, seed=2)


@pytest.fixture(scope="module")
def longer_epochs_dataset(session_dir):
    """Epochs of about ten seconds: the urgent job arrives inside one."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(session_dir / "shapes640", train=640, val=8, imgsz=64, seed=3)


def test_waiting_segments_start_by_tier(yoloq_stack, tiny_dataset, long_epochs_dataset, tmp_path):
    """Two slots busy; low, normal, high arrive in that order; as slots free they start
    high, then normal, then low."""
    with worker_with(YOLOQ_DECLARED_GPUS="2xCPU:8"):
        blockers = [submit(write_spec(tmp_path / f"b{i}.yaml", long_epochs_dataset, name=f"blocker{i}",
                                      team="ops", priority="urgent", epochs=50, segment_epochs=50,
                                      batch=16, export=[]))
                    for i in range(2)]
        for job in blockers:
            wait_for(lambda j=job: running_epoch(j) is not None, f"{job} running")
        order = {}
        for tier in ("low", "normal", "high"):
            order[tier] = submit(write_spec(tmp_path / f"{tier}.yaml", tiny_dataset, name=f"order-{tier}",
                                            team=f"team-{tier}", priority=tier, epochs=1, export=[]))
        wait_for(lambda: all(segments(j) for j in order.values()), "all three queued", 600)
        assert all(running_epoch(j) is not None for j in blockers), "blockers hold both slots"
        # One slot frees at a time, so each start is the scheduler's choice among all waiting
        # (CI once freed both at once: normal and low were admitted together and low's
        # process happened to reach Running first).
        _cancel(blockers[0])
        wait_for(lambda: any(s.start_time for s in segments(order["high"])), "high started")
        assert wait_final(order["high"])["state"] == "Completed"  # its slot frees: normal's turn
        wait_for(lambda: any(s.start_time for s in segments(order["normal"])), "normal started")
        # Low may already have had its turn (normal's one epoch can end before this looks):
        # what must hold is that it started after normal, on the slot normal freed.
        normal_start = min(s.start_time for s in segments(order["normal"]) if s.start_time)
        low_starts = [s.start_time for s in segments(order["low"]) if s.start_time]
        assert all(t > normal_start for t in low_starts), "low went before normal"
        _cancel(blockers[1])
        for blocker in blockers:  # a user's cancel stops a running segment at its next boundary
            assert wait_final(blocker)["state"] == "Cancelled"
        for job in order.values():
            assert wait_final(job)["state"] == "Completed"
    start = {tier: min(s.start_time for s in segments(job)) for tier, job in order.items()}
    assert start["high"] < start["normal"] < start["low"], start


def _cancel(job: str) -> None:
    began = time.monotonic()
    assert yoloq("cancel", job).returncode == 0
    print(f"cancel {job}: {time.monotonic() - began:.1f}s")


def test_no_preemption_inside_min_runtime(yoloq_stack, tiny_dataset, long_epochs_dataset, tmp_path):
    """With urgent's override turned off (it is on by default), a victim inside its minimum
    runtime keeps its GPU and the urgent job waits for it to finish."""
    with worker_with(YOLOQ_MIN_RUNTIME_S=3600, YOLOQ_URGENT_OVERRIDES_MIN_RUNTIME=0):
        low = submit(write_spec(tmp_path / "low.yaml", long_epochs_dataset, name="thrash-low",
                                priority="low", epochs=2, segment_epochs=2, batch=16, export=[]))
        wait_for(lambda: running_epoch(low) is not None, "low running")
        pid = freeze(running_segment(low).id)  # hold it while the urgent job queues
        urgent = submit(write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="thrash-urgent",
                                   team="oncall", priority="urgent", epochs=1, export=[]))
        try:
            wait_for(lambda: segments(urgent), "urgent queued", 600)
            time.sleep(6)  # its Scheduled event's pass and a poll (5 s) with the urgent segment waiting
        finally:
            thaw(pid)
        assert wait_final(low)["preemptions"] == 0
        assert wait_final(urgent)["state"] == "Completed"
    [low_segment] = segments(low)
    assert low_segment.state.name == "Completed"
    assert (low_segment.labels or {}).get("yoloq.preempt") != "requested"
    assert min(s.start_time for s in segments(urgent)) >= low_segment.end_time


def test_stuck_victim_is_killed_after_grace_and_resumes(yoloq_stack, tiny_dataset,
                                                       longer_epochs_dataset, tmp_path):
    """The victim is frozen (SIGSTOP, as a hung data loader would be) so it cannot reach an
    epoch boundary: the worker kills it after its grace and the job resumes from its last
    checkpoint, each epoch logged once."""
    with worker_with(YOLOQ_GRACE_S=1, YOLOQ_GRACE_EPOCHS=0):
        low = submit(write_spec(tmp_path / "low.yaml", longer_epochs_dataset, name="stuck-low",
                                priority="low", epochs=3, segment_epochs=3, batch=16, export=[]))
        wait_for(lambda: (running_epoch(low) or 0) >= 1, "low past epoch 1")
        freeze(running_segment(low).id)  # never thawed: the worker must kill it
        urgent = submit(write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="stuck-urgent",
                                   team="oncall", priority="urgent", epochs=1, export=[]))
        assert wait_final(urgent)["state"] == "Completed"
        final = wait_final(low)
    assert final["state"] == "Completed" and final["epochs_done"] == 3
    first = segments(low)[0]
    assert first.state.is_crashed(), first.state  # killed inside its epoch, after the grace
    assert (first.labels or {}).get("yoloq.preempt") == "requested"
    _assert_each_epoch_logged_once(low, 3)


def running_segment(job_id: str):
    return next(s for s in segments(job_id) if s.state and s.state.is_running())


def _assert_each_epoch_logged_once(job_id: str, epochs: int) -> None:
    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    [run] = client.search_runs([exp.experiment_id], filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/box_loss")]
    assert sorted(steps) == list(range(1, epochs + 1)), steps  # every epoch delivered
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    # MLflow skips a (metric, step) already logged, so only the epoch ledger can show a repeat;
    # an epoch killed before its checkpoint is not a training (it never reached the store)
    counts = trainings_per_epoch(epoch_trainings(job_id))
    assert counts == {epoch: 1 for epoch in range(1, epochs + 1)}, counts

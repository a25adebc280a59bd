"""The seeds' scenario on the real stack (one declared CPU slot, real training):
a low-tier job holds the only slot; an urgent job arrives; the low job stops at
its next epoch boundary, the urgent job runs to completion, and the low job
resumes and finishes with exactly its epochs in MLflow and final weights equal
to the same job trained without interruption."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from stack_helpers import freeze, json_lines, thaw, wait_final, write_spec, yoloq

SEGMENT_CLI = Path(__file__).resolve().parent / "segment_cli.py"  # the test-only segment runner

pytestmark = [pytest.mark.service, pytest.mark.training]
EPOCHS = 6


def wait_running(job_id: str, timeout_s: float = 600):
    """The id of the job's segment once its process is training."""
    from prefect.client.orchestration import get_client

    from work_pools.processes import recorded_pid
    from yoloq.records.jobs import segments_of

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with get_client(sync_client=True) as client:
            running = [s for s in segments_of(client, job_id) if s.state and s.state.is_running()]
        if running and recorded_pid(running[0].id) is not None:
            return running[0].id
        time.sleep(0.5)
    raise AssertionError(f"{job_id} never started")


def wait_label(flow_run_id, key: str, value: str, timeout_s: float = 600) -> None:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with get_client(sync_client=True) as client:
            if (client.read_flow_run(flow_run_id).labels or {}).get(key) == value:
                return
        time.sleep(0.5)
    raise AssertionError(f"label {key}={value} never set on {flow_run_id}")


@pytest.fixture(scope="module")
def slower_dataset(session_dir):
    """Enough images that six epochs outlast the urgent job's way through the queue."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(session_dir / "shapes48", train=48, val=8, imgsz=64, seed=1)


def submit(spec) -> str:
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def submit_while_frozen(victim: str, urgent_spec) -> str:
    """Submit `urgent_spec` with the `victim` segment held inside its epoch until the scheduler has
    asked it to stop (so the scenario does not depend on how fast this machine trains); the
    victim is thawed then. The urgent job's id."""
    pid = freeze(victim)
    urgent = submit(urgent_spec)
    try:
        wait_label(victim, "yoloq.preempt", "requested")
    finally:
        thaw(pid)
    return urgent


def test_urgent_preempts_low_at_epoch_boundary_and_low_resumes_exactly(
        yoloq_stack, slower_dataset, tiny_dataset, tmp_path):
    low_spec = write_spec(tmp_path / "low.yaml", slower_dataset, name="low-long", priority="low",
                          epochs=EPOCHS, segment_epochs=EPOCHS, batch=8)
    urgent_spec = write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="urgent-fix",
                             team="oncall", priority="urgent", epochs=1, segment_epochs=1)
    low = submit(low_spec)
    victim = wait_running(low)
    urgent = submit_while_frozen(victim, urgent_spec)

    urgent_status = wait_final(urgent)
    low_status = wait_final(low)
    assert urgent_status["state"] == "Completed"
    assert low_status["state"] == "Completed"
    assert low_status["preemptions"] >= 1
    assert low_status["epochs_done"] == EPOCHS

    history = json_lines(yoloq("history", low, "--json").stdout)
    preempted = [r for r in history if r["what"] == "preempted"]
    assert preempted and urgent in preempted[0]["detail"]
    resumed = [r for r in history if r["what"] == "resumed"]
    assert resumed and resumed[0]["time"] > preempted[0]["time"]

    _assert_preempted_without_error_logs(victim)
    _assert_mlflow_has_each_epoch_once(low)
    _assert_weights_equal_uninterrupted(low, low_spec, tmp_path)


def test_an_urgent_job_is_announced_and_its_victim_asked_before_its_segment_exists(
        yoloq_stack, slower_dataset, tiny_dataset, tmp_path):
    """The job runner is frozen, so the urgent job's parent cannot start, let alone queue its
    first segment: only the submit's announcement can make the leader ask the victim."""
    import psutil
    from prefect.client.orchestration import get_client

    from work_pools.announce import LABEL
    from yoloq.ops import stack as stack_mod
    from yoloq.records.jobs import parent_run, segments_of

    low_spec = write_spec(tmp_path / "low.yaml", slower_dataset, name="low-announced", priority="low",
                          epochs=3, segment_epochs=3, batch=8)
    urgent_spec = write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="urgent-announced",
                             team="oncall", priority="urgent", epochs=1, segment_epochs=1)
    low = submit(low_spec)
    victim = wait_running(low)
    pid = freeze(victim)  # inside its epochs: a victim past its last one is asked nothing
    runner = psutil.Process(stack_mod._read_pid(yoloq_stack, "runner"))
    runner.suspend()
    try:
        urgent = submit(urgent_spec)
        wait_label(victim, "yoloq.preempt", "requested", timeout_s=120)
        with get_client(sync_client=True) as client:
            assert segments_of(client, urgent) == []  # its parent has not run
            assert client.read_flow_run(victim).labels["yoloq.preempted_by"] == urgent
    finally:
        runner.resume()
        thaw(pid)
    assert wait_final(urgent)["state"] == "Completed"
    low_status = wait_final(low)
    assert low_status["state"] == "Completed" and low_status["epochs_done"] == 3
    with get_client(sync_client=True) as client:
        assert parent_run(client, urgent).labels[LABEL] == ""  # withdrawn by its first segment
        assert LABEL not in (parent_run(client, low).labels or {})  # a low job is not announced


def _assert_preempted_without_error_logs(segment_id) -> None:
    """A preemption is normal operation: the victim's run ends Preempted, and its log in the
    Prefect UI has no ERROR (the stock engine entry point logged a CancelledRun traceback)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterLevel

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(segment_id).state.name == "Preempted"
        errors = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[segment_id]),
                                                       level=LogFilterLevel(ge_=40)))
    assert [log.message[:200] for log in errors] == []


def _assert_mlflow_has_each_epoch_once(job_id: str) -> None:
    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    [run] = client.search_runs([exp.experiment_id], filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    for metric in ("train/box_loss", "metrics/mAP50-95B", "lr/pg0"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
        assert sorted(steps) == list(range(1, EPOCHS + 1)), (metric, steps)  # all delivered
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    # MLflow skips a (metric, step) already logged, so only the epoch ledger can show a repeat
    counts = trainings_per_epoch(epoch_trainings(job_id))
    assert counts == {epoch: 1 for epoch in range(1, EPOCHS + 1)}, counts
    assert int(run.data.tags["yoloq.preemptions"]) >= 1


def _assert_weights_equal_uninterrupted(job_id: str, spec_path, tmp_path) -> None:
    """The reference trains in a fresh process, like a segment (no state left by other tests)."""
    import subprocess
    import sys

    from blocks import stores

    restored = stores.checkpoint_store().restore(job_id, tmp_path / "restored")
    assert restored is not None and restored.info.epoch == EPOCHS
    result_file = tmp_path / "one-go.json"
    proc = subprocess.run([sys.executable, str(SEGMENT_CLI), "--spec", str(spec_path),
                           "--workdir", str(tmp_path / "one-go"), "--stop-after", str(EPOCHS),
                           "--result", str(result_file)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_go_path = json.loads(result_file.read_text())["result"]["checkpoint"]
    queued = torch.load(restored.path, map_location="cpu", weights_only=False)["yoloq"]
    one_go = torch.load(one_go_path, map_location="cpu", weights_only=False)["yoloq"]
    for part in ("model", "ema"):
        differ = [k for k, v in one_go[part].items() if not torch.equal(v, queued[part][k])]
        assert not differ, f"{part}: {len(differ)} tensors differ"

"""Fault matrix, process family, on the embedded stack: the segment SIGKILLed mid-epoch,
the segment SIGKILLed during the final evaluate/export, the Prefect server killed for
20 s and restarted. Each job must complete with its full epoch count, one FINISHED MLflow
run, and every epoch trained exactly once according to the epoch ledger."""

from __future__ import annotations

import contextlib
import json
import signal
import time

import pytest

from fault_helpers import (assert_job_recovered, epoch_reached, kill_segment, mlflow_runs, report,
                           running_segment, segments, submit, wait_for)
from stack_helpers import freeze, json_lines, thaw, write_spec, yoloq

pytestmark = [pytest.mark.service, pytest.mark.training, pytest.mark.integration,
              pytest.mark.timeout(1500)]  # a whole job on the stack, stack start included


@pytest.fixture(scope="module")
def epochs_dataset(session_dir):
    """Epochs of a few seconds on this CPU, so a job can be caught inside one."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(session_dir / "faults160", train=160, val=8, imgsz=64, seed=2)


def test_segment_sigkill_mid_epoch_resumes_with_no_command(yoloq_stack, epochs_dataset, tmp_path):
    job = submit(write_spec(tmp_path / "job.yaml", epochs_dataset, name="killed-mid-epoch",
                            epochs=3, segment_epochs=3, batch=16, export=[]))
    wait_for(lambda: epoch_reached(job, 1), "epoch 1 checkpointed")
    victim = running_segment(job)
    killed_at = kill_segment(victim.id)  # inside epoch 2: its checkpoint label is not set yet
    resumed = wait_for(lambda: next((s for s in segments(job) if s.id != victim.id and s.start_time),
                                    None), "a new segment started")
    recovery_s = time.monotonic() - killed_at
    result = assert_job_recovered(job, 3)
    first = next(s for s in segments(job) if s.id == victim.id)
    assert first.state.is_crashed(), first.state
    assert result["trainings"] == {1: 1, 2: 1, 3: 1}, "the killed partial epoch is not a training"
    history = json_lines(yoloq("history", job, "--json").stdout)
    trained = [r for r in history if r["what"] == "trained"]
    assert [r["epoch"] for r in trained] == [1, 2, 3] and all(r["node"] for r in trained)
    assert {r["segment"] for r in trained if r["epoch"] == 1} == {str(victim.id)}
    report("segment SIGKILL mid-epoch", recovery_s=round(recovery_s, 1), resumed_by=resumed.name,
           trainings=result["trainings"])


def test_segment_sigkill_during_final_evaluate_export_finalises_once(yoloq_stack, epochs_dataset,
                                                                      tmp_path):
    from blocks import stores

    job = submit(write_spec(tmp_path / "job.yaml", epochs_dataset, name="killed-finalising",
                            epochs=2, segment_epochs=2, batch=16, export=["torchscript"]))
    store = stores.checkpoint_store()
    wait_for(lambda: (store.latest(job) or None) and store.latest(job).finished,
             "the finished checkpoint", every_s=0.1)
    victim = running_segment(job)
    assert victim is not None and mlflow_runs(job)[0].info.status == "RUNNING", \
        "caught after the last epoch, before finalising ended"
    killed_at = kill_segment(victim.id)
    result = assert_job_recovered(job, 2)
    recovery_s = time.monotonic() - killed_at
    names = [s.name for s in segments(job)]
    assert any(".finalise-" in n for n in names), names  # only evaluate/export ran again
    assert result["trainings"] == {1: 1, 2: 1}
    _assert_finalised_once(job, result["run"], "killed-finalising")
    report("segment SIGKILL during evaluate/export", recovery_s=round(recovery_s, 1),
           segments=names, trainings=result["trainings"])


def _assert_finalised_once(job: str, run, model_name: str) -> None:
    from mlflow.tracking import MlflowClient

    from blocks import stores
    from yoloq.base.paths import state_paths

    client = MlflowClient(stores.mlflow_tracking_uri()[0])
    evaluated = [k for k in run.data.metrics if k.startswith("eval/")]
    assert evaluated, "evaluation logged"
    for key in evaluated:
        assert len(client.get_metric_history(run.info.run_id, key)) == 1, key
    versions = client.search_model_versions(f"name = '{model_name}'")
    assert len(versions) == 1, [v.version for v in versions]
    exported = list((state_paths().exports / job).glob("*.torchscript"))
    assert len(exported) == 1, exported


def test_worker_sigkill_then_up_never_starts_a_second_parent(yoloq_stack, epochs_dataset, tmp_path):
    """`yoloq up` after the worker died: the live parent (and its runner) are left alone, the
    orphaned segment is killed and marked Crashed by the new worker (its orphan check), the job
    resumes from its checkpoint, and the same parent process finishes the job (its token on
    the flow run never changes)."""
    import os

    from prefect.client.orchestration import get_client

    from flows.job import ParentGuard
    from yoloq.records.jobs import parent_run

    job = submit(write_spec(tmp_path / "job.yaml", epochs_dataset, name="worker-killed",
                            epochs=3, segment_epochs=3, batch=16, export=[]))
    wait_for(lambda: epoch_reached(job, 1), "epoch 1 checkpointed")
    with get_client(sync_client=True) as client:
        token = (parent_run(client, job).labels or {}).get(ParentGuard.LABEL)
    assert token, "the parent marks its run with its token"
    # frozen, the orphan cannot finish its two epochs left before the new worker is up (in
    # CI it once did, and ended Completed instead of being killed by the orphan check)
    orphan = freeze(running_segment(job).id)
    worker_pid = int((yoloq_stack.paths.pids / "worker.pid").read_text())
    os.kill(worker_pid, signal.SIGKILL)  # the worker alone: its segment becomes an orphan
    killed_at = time.monotonic()
    try:
        up = yoloq("up")
        assert up.returncode == 0, up.stderr[-2000:]
        assert "recovered" not in up.stdout, up.stdout  # nothing to reset: every process is alive
        wait_for(lambda: segments(job)[0].state.is_final(), "the new worker's orphan check", 300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            thaw(orphan)  # killed by the orphan check; if it was not, it trains on
    result = assert_job_recovered(job, 3)
    first = segments(job)[0]
    assert first.state.is_crashed(), first.state  # marked by the new agent's orphan check
    with get_client(sync_client=True) as client:
        assert (parent_run(client, job).labels or {}).get(ParentGuard.LABEL) == token, \
            "one parent process ran the job from start to end"
    report("worker SIGKILL mid-epoch, then yoloq up", completed_after_s=round(time.monotonic() - killed_at, 1),
           segments=[f"{s.name}:{s.state.name}" for s in segments(job)], trainings=result["trainings"])


def test_prefect_server_killed_for_20s_then_restarted(yoloq_stack, epochs_dataset, tmp_path):
    """Last in the module: it restarts the session's server. Segments of one epoch, so the
    job needs new segments admitted after the restart, not only the running one to go on."""
    job = submit(write_spec(tmp_path / "job.yaml", epochs_dataset, name="server-outage",
                            epochs=3, segment_epochs=1, batch=16, export=[]))
    wait_for(lambda: running_segment(job), "the first segment running")
    server_pid = int((yoloq_stack.paths.pids / "server.pid").read_text())
    killed_at = time.monotonic()
    import os

    os.killpg(os.getpgid(server_pid), signal.SIGKILL)
    time.sleep(20)
    up = yoloq("up")
    assert up.returncode == 0, up.stderr[-2000:]
    back_s = time.monotonic() - killed_at
    result = assert_job_recovered(job, 3)
    report("Prefect server killed 20 s", server_back_after_s=round(back_s, 1),
           segments=[f"{s.name}:{s.state.name}" for s in segments(job)],
           trainings=result["trainings"])

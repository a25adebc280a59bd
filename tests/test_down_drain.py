"""`yoloq down` drains, on a private real stack with a checkpoint every 3 epochs:

- a clean `down` stops the running segment at its next epoch boundary with a checkpoint
  (state `Drained`, not a preemption), says the epoch, and after `up` the job resumes from
  exactly that epoch: no epoch is trained twice, and the first segment after `up` starts
  within seconds (the scheduler lease was released, not left to expire);
- `down --drain-timeout 0` stops it hard and says which epochs will be retrained.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack_helpers import FINAL_STATES, wait_for, write_spec

pytestmark = [pytest.mark.service, pytest.mark.training]

EPOCHS = 8
CHECKPOINT_EVERY = 3
PLACED_AFTER_UP_S = 20.0  # well under the 60 s lease a stale holder would keep


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A private stack (own state folder and port) whose segments upload every 3 epochs."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from yoloq.ops.stack import free_port

    home = tmp_path_factory.mktemp("drain") / "home"
    port = free_port()
    env = {**os.environ, "YOLOQ_HOME": str(home), "YOLOQ_PORT": str(port),
           "YOLOQ_CHECKPOINT_EVERY": str(CHECKPOINT_EVERY), "YOLOQ_DECLARED_GPUS": "1xCPU:8",
           "YOLOQ_MIN_RUNTIME_S": "0"}

    def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=env)

    up = cli("up")
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        with temporary_settings(updates={PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):
            yield cli, home, env
    finally:
        cli("down", "--drain-timeout", "0")


@pytest.fixture(scope="module")
def slower_dataset(tmp_path_factory) -> Path:
    """Epochs of a few seconds, so a test can hold a segment inside its second epoch."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(tmp_path_factory.mktemp("shapes40"), train=40, val=4, imgsz=64, seed=0)


def _segment_pid(home: Path, flow_run_id) -> int:
    """The PID its node agent recorded for a running segment (`work_pools.processes`)."""
    found = list((home / "pids" / "segments").glob(f"*/{flow_run_id}.pid"))
    assert found, f"no PID recorded for segment {flow_run_id}"
    return int(found[0].read_text().strip())


def _run(flow_run_id):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def _segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def _training(job_id: str, at_least: int):
    """The job's running segment once it has trained `at_least` epochs (its label)."""
    for run in _segments(job_id):
        labels = run.labels or {}
        if run.state and run.state.is_running() and int(labels.get("yoloq.trained_epoch") or 0) >= at_least:
            return run
    return None


def _submit(cli, tmp_path: Path, dataset: Path, name: str) -> str:
    spec = write_spec(tmp_path / f"{name}.yaml", dataset, name=name, epochs=EPOCHS,
                      segment_epochs=EPOCHS, export=[])
    out = cli("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)["job_id"]


def _wait_job(cli, job_id: str, timeout_s: float = 900) -> str:
    def ended():
        out = cli("status", job_id, "--json")
        state = json.loads(out.stdout)["state"] if out.returncode == 0 else None
        return state if state in FINAL_STATES else None

    return wait_for(ended, f"job {job_id} to end", timeout_s, every_s=3)


def _epochs_trained(home: Path, job_id: str) -> list:
    from blocks.checkpoints import LocalCheckpointStore
    from yoloq.base.paths import state_paths
    from yoloq.records.jobs import epoch_trainings

    return epoch_trainings(job_id, LocalCheckpointStore(path=str(state_paths(home).checkpoints)))


def _not_a_preemption(run) -> None:
    labels = run.labels or {}
    assert run.state.name != "Preempted" and labels.get("yoloq.preempt") != "requested", \
        "a drain must not count as a preemption"
    assert labels.get("yoloq.drain") == "requested"


def test_a_clean_down_drains_at_an_epoch_boundary_and_up_resumes_there(stack, tmp_path, slower_dataset):
    from yoloq.base.paths import state_paths
    from yoloq.records.jobs import trainings_per_epoch

    cli, home, env = stack
    job_id = _submit(cli, tmp_path, slower_dataset, "drained")
    before = wait_for(lambda: _training(job_id, 1), "the segment's first epoch", 600, 0.1)
    pid = _segment_pid(home, before.id)
    os.kill(pid, signal.SIGSTOP)  # held in epoch 1 or 2 until the drain has asked: it must stop
    try:  # at a boundary the periodic interval (3) would not upload at
        trained_before = int(_run(before.id).labels["yoloq.trained_epoch"])
        stopping = subprocess.Popen([sys.executable, "-m", "yoloq.cli", "down"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (_run(before.id).labels or {}).get("yoloq.drain"), "the drain request", 120, 0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = stopping.communicate(timeout=600)
    down = subprocess.CompletedProcess(stopping.args, stopping.returncode, out, err)
    assert down.returncode == 0, down.stderr[-3000:]
    leases = state_paths(home).prefect_home / "concurrency_leases"
    assert [p.name for p in leases.glob("*.json") if p.name != "expirations.json"] == [], \
        "down must release the scheduler lease, not leave it to expire"
    said = re.search(rf"job {re.escape(job_id)}: drained at epoch (\d+) \(checkpoint saved\)", down.stdout)
    assert said, f"down must name the epoch it stopped at:\n{down.stdout}\n{down.stderr[-2000:]}"
    stopped_at = int(said.group(1))
    assert stopped_at in (trained_before, trained_before + 1) and stopped_at % CHECKPOINT_EVERY, \
        (trained_before, stopped_at)

    up_cmd = cli("up")
    up_returned = time.time()
    assert up_cmd.returncode == 0, up_cmd.stderr[-3000:]
    drained = next(r for r in _segments(job_id) if r.id == before.id)
    assert drained.state.name == "Drained", drained.state
    _not_a_preemption(drained)
    labels = drained.labels or {}
    assert int(labels["yoloq.epoch"]) == stopped_at, "the drain must upload at the boundary it stops at"
    assert int(labels["yoloq.trained_epoch"]) == stopped_at, "it trained no epoch past its checkpoint"

    def next_running():
        later = [r for r in _segments(job_id) if r.id != before.id and r.start_time is not None]
        return later[0] if later else None

    resumed = wait_for(next_running, "the job's next segment to start after up", 300)
    created_s = resumed.created.timestamp() - up_returned
    placed_s = float(resumed.labels["yoloq.assigned_at"]) - up_returned
    started_s = resumed.start_time.timestamp() - up_returned
    print(f"after `yoloq up` returned: next segment created {created_s:.1f} s, placed "
          f"{placed_s:.1f} s, Running {started_s:.1f} s")
    # The scheduler places it as soon as it exists: a lease left to expire would hold it for
    # up to a lease (60 s). (Running also counts the segment's own start-up in its process.)
    assert placed_s - max(created_s, 0.0) < PLACED_AFTER_UP_S, (created_s, placed_s)
    assert placed_s < PLACED_AFTER_UP_S, (created_s, placed_s)
    assert int(((resumed.parameters or {}).get("plan") or {}).get("epochs_done") or 0) == stopped_at

    assert _wait_job(cli, job_id) == "Completed"
    records = _epochs_trained(home, job_id)
    assert trainings_per_epoch(records) == {e: 1 for e in range(1, EPOCHS + 1)}, \
        "an epoch was trained twice after a clean down"
    first = {r.epoch for r in records if r.segment == str(before.id)}
    assert first == set(range(1, stopped_at + 1)), "the drained segment's epochs were all kept"


def test_a_drain_that_runs_out_stops_hard_and_names_the_epochs_retrained(stack, tmp_path, tiny_dataset):
    cli, home, _ = stack
    assert cli("up").returncode == 0  # idempotent: the stack of the previous test, or a new one
    job_id = _submit(cli, tmp_path, tiny_dataset, "hardstop")
    running = wait_for(lambda: _training(job_id, 1), "the segment's first epoch", 600)

    down = cli("down", "--drain-timeout", "0")
    assert down.returncode == 0, down.stderr[-3000:]
    said = re.search(rf"job {re.escape(job_id)}: stopped hard .*its last checkpoint holds epoch "
                     r"(\d+), so epochs? (\d+)(?:-(\d+))? will be retrained", down.stdout)
    assert said, f"down must say which epochs will be retrained:\n{down.stdout}\n{down.stderr[-2000:]}"
    checkpoint, first = int(said.group(1)), int(said.group(2))
    assert first == checkpoint + 1 and checkpoint % CHECKPOINT_EVERY == 0, said.group(0)

    assert cli("up").returncode == 0
    stopped = next(r for r in _segments(job_id) if r.id == running.id)
    assert stopped.state.is_crashed() and "will be retrained" in (stopped.state.message or "")
    _not_a_preemption(stopped)
    assert _wait_job(cli, job_id) == "Completed"

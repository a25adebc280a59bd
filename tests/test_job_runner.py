"""The job runner on the real stack: a waiting job is a thread of the one runner process.

The GPU worker is paused (SIGSTOP of its process group) while jobs queue, so every job waits
with its first segment Scheduled, as behind a busy slot; it is resumed before anything must
train or be cancelled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from cluster_helpers import times_started
from stack_helpers import FINAL_STATES, paused_worker

pytestmark = [pytest.mark.service, pytest.mark.training]



def stack_processes(stack) -> dict[int, float]:
    """PID -> RSS (MB) of every process of the stack (what `yoloq down` would stop)."""
    found = {}
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
            if env.get("YOLOQ_HOME") == str(stack.paths.root) and env.get("YOLOQ_STACK") == "1":
                found[proc.pid] = proc.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def launcher_settled(stack) -> bool:
    """The node's warm launcher (if any) has done its imports: idle for a second and a half.
    It imports torch and the rest at node start (about 950 MB), on its own schedule; a job
    waiting does not touch it."""
    launchers = [psutil.Process(pid) for pid in stack_processes(stack)
                 if "work_pools.launcher" in " ".join(psutil.Process(pid).cmdline())]
    before = [sum(p.cpu_times()[:2]) for p in launchers]
    time.sleep(1.5)
    return all(sum(p.cpu_times()[:2]) - cpu < 0.05 for p, cpu in zip(launchers, before))


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 600) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def submit(data, name: str, epochs: int = 1) -> str:
    from yoloq.commands.submit import create_job_run
    from yoloq.domain.spec import parse_spec

    spec = parse_spec({"name": name, "team": "vision", "priority": "normal",
                       "model": "yolov8n.yaml", "data": str(data), "epochs": epochs, "imgsz": 64,
                       "batch": 4, "segment_epochs": 1, "export": [],
                       "train_args": {"seed": 0, "deterministic": True, "workers": 0,
                                      "plots": False}})
    return create_job_run(spec, reason="test_job_runner")


def job(job_id: str):
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import find_job

    with get_client(sync_client=True) as client:
        return find_job(client, job_id)


def waiting(job_ids: list[str]) -> bool:
    """Every job's parent runs and has exactly one segment, Scheduled."""
    for job_id in job_ids:
        record = job(job_id)
        if record.flow_run.state.name != "Running" or len(record.segments) != 1:
            return False
        if not record.segments[0].state.is_scheduled():
            return False
    return True


def final_state(job_id: str) -> str | None:
    name = job(job_id).flow_run.state.name
    return name if name in FINAL_STATES else None


def test_waiting_jobs_add_no_process_and_bounded_memory(yoloq_stack, tiny_dataset):
    """Ten jobs waiting cost the runner threads, not processes: the stack's process set is
    the same with one and with ten, nine more jobs add far less than one old parent process
    (about 340 MB each), and one thread each (Prefect's engine would add a suspension observer
    with its own event loop and websocket, and a heartbeat thread, per parent)."""
    from yoloq.ops import stack as stack_mod

    runner = psutil.Process(stack_mod._read_pid(yoloq_stack, "runner"))
    with paused_worker(yoloq_stack):  # the jobs are cancelled before the worker can start them
        first = [submit(tiny_dataset, "wait0")]
        more: list[str] = []
        try:
            wait_for(lambda: waiting(first), "one job waiting")
            wait_for(lambda: launcher_settled(yoloq_stack), "the warm launcher's imports", 300)
            time.sleep(3)
            with_one, threads_with_one = stack_processes(yoloq_stack), runner.num_threads()
            more = [submit(tiny_dataset, f"wait{i}") for i in range(1, 10)]
            wait_for(lambda: waiting(first + more), "ten jobs waiting", 240)
            time.sleep(3)
            with_ten, threads_with_ten = stack_processes(yoloq_stack), runner.num_threads()
            assert set(with_ten) == set(with_one), "a waiting job must not start a process"
            grown = sum(with_ten.values()) - sum(with_one.values())
            assert grown < 150, f"nine more waiting jobs added {grown:.0f} MB ({with_one} -> {with_ten})"
            assert threads_with_ten - threads_with_one <= 9 + 2, (threads_with_one, threads_with_ten)
        finally:
            cancel(first + more)


def cancel(job_ids: list[str]) -> None:
    for job_id in job_ids:
        out = subprocess.run([sys.executable, "-m", "yoloq.cli", "cancel", job_id],
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr


def test_job_cancelled_while_waiting_ends_cancelled(yoloq_stack, tiny_dataset):
    with paused_worker(yoloq_stack):
        job_id = submit(tiny_dataset, "cancel-me")
        wait_for(lambda: waiting([job_id]), "the job waiting")
        cancel([job_id])
        # Its segment, never started, is Cancelled at once (Prefect ends a Scheduled run that
        # is asked to cancel), so a worker that polled it before the cancel cannot start it:
        # Prefect refuses Pending from a final state.
        [segment] = job(job_id).segments
        assert segment.state.is_cancelled(), segment.state
        assert proposed_pending(segment.id) != "ACCEPT"
    assert wait_for(lambda: final_state(job_id), "the cancelled job's end") == "Cancelled"
    [segment] = job(job_id).segments
    assert segment.state.is_cancelled(), segment.state
    # Nor did it start when the worker woke: no GPU time for a job nobody wants.
    assert times_started(segment.id) == 0


def proposed_pending(run_id) -> str:
    """What Prefect answers the worker's first step for this run (its Pending proposal)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Pending

    with get_client(sync_client=True) as client:
        return client.set_flow_run_state(run_id, Pending()).status.value


def test_runner_killed_while_jobs_wait_each_job_trains_once(yoloq_stack, tiny_dataset):
    """SIGKILL of the runner with three jobs waiting, then `yoloq up`: the new runner adopts
    every parent and its waiting segment; every job completes, every epoch trained once."""
    from yoloq.ops import stack as stack_mod
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    with paused_worker(yoloq_stack):
        jobs = [submit(tiny_dataset, f"survive{i}") for i in range(3)]
        wait_for(lambda: waiting(jobs), "three jobs waiting")
        old = stack_mod._read_pid(yoloq_stack, "runner")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: not psutil.pid_exists(old) or
                 psutil.Process(old).status() == psutil.STATUS_ZOMBIE, "the runner gone", 30)
        stack_mod.up(echo=lambda *a: None)
        new = stack_mod._read_pid(yoloq_stack, "runner")
        assert new != old
        wait_for(lambda: all(job(j).flow_run.infrastructure_pid.endswith(f":{new}") for j in jobs)
                 and waiting(jobs), "the new runner adopting the three jobs", 600)
    for job_id in jobs:
        assert wait_for(lambda j=job_id: final_state(j), f"{job_id} ending", 300) == "Completed"
    for job_id in jobs:
        assert trainings_per_epoch(epoch_trainings(job_id)) == {1: 1}, job_id
        assert len(job(job_id).segments) == 1, "adopted, not queued again"
    # The new runner ran these parents from adoption to their end without importing MLflow
    # (150-200 MB): its first segment opens the job's MLflow run, a label says it is finalised.
    # `import mlflow` maps pandas' compiled modules.
    assert "pandas/_libs" not in Path(f"/proc/{new}/maps").read_text(), "the runner imported MLflow"


def test_a_cancel_that_lands_as_the_flow_ends_leaves_the_run_cancelled(yoloq_stack, monkeypatch):
    """The server refuses the engine's final state of a run set Cancelling meanwhile, and
    nothing else would end it: the runner must, or the job stays Cancelling for good."""
    from prefect.client.orchestration import get_client

    from work_pools import job_runner

    monkeypatch.syspath_prepend(str(job_runner.PROJECT_DIR))
    from tests.runner_cancel_probe import cancelled_at_the_end

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow(cancelled_at_the_end)
        deployment = client.create_deployment(
            flow_id=flow_id, name=f"cancel-probe-{os.getpid()}",
            entrypoint="tests/runner_cancel_probe.py:cancelled_at_the_end")
        run = client.create_flow_run_from_deployment(deployment)
        assert job_runner.execute(run.id) == 0
        state = client.read_flow_run(run.id).state
    assert state.is_cancelled(), state
    assert state.message == "cancelled as the job ended (probe cancelled)", state.message

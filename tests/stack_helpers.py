"""Helpers for tests that drive the real stack through the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml


def write_spec(path: Path, data: Path, **overrides) -> Path:
    spec = {"name": "e2e", "team": "vision", "priority": "normal", "model": "yolov8n.yaml",
            "data": str(data), "epochs": 2, "imgsz": 64, "batch": 4, "segment_epochs": 1,
            "export": ["torchscript"],
            "train_args": {"seed": 0, "deterministic": True, "workers": 0, "plots": False}}
    spec.update(overrides)
    path.write_text(yaml.safe_dump(spec))
    return path


# What `use_stack` puts in this process's environment for the session's stack. A CLI run for a
# private state folder must not inherit them: an explicit PREFECT_API_URL names the server to
# use, so `yoloq --home PRIVATE team add` would write into the session's stack.
SESSION_STACK_ENV = ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_PROFILE", "PREFECT_SERVER_API_PORT",
                     "YOLOQ_PORT", "YOLOQ_API_PORT", "YOLOQ_SERVER", "YOLOQ_TOKEN")


def private_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a CLI that drives the stack of state folder `home` alone."""
    env = {k: v for k, v in os.environ.items() if k not in SESSION_STACK_ENV}
    return {**env, "YOLOQ_HOME": str(home), **extra}


def yoloq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True,
                          text=True, timeout=300)


@contextmanager
def published_node(node: str, gpu_name: str, mem_gb: float, pool: str) -> Iterator[None]:
    """A live record of a one-GPU node in `pool` while the block runs, removed after it: a
    record left behind counts as its pool's capacity until its heartbeat lapses (30 s), which
    broke the next test on the stack that counts GPU slots."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.inventory import GpuInfo
    from work_pools.nodes import make_record, publish, remove

    gpu = GpuInfo(0, f"{node}-gpu0", gpu_name, mem_gb, mem_gb)

    async def _with_client(step) -> None:
        async with get_client() as client:
            await step(client)

    run_coro_as_sync(_with_client(lambda c: publish(c, make_record(node, [gpu], [], pool=pool))))
    try:
        yield
    finally:
        run_coro_as_sync(_with_client(lambda c: remove(c, node)))


FINAL_STATES = ("Completed", "Failed", "Cancelled", "Crashed")


def job_states_here(job_id: str | None = None) -> dict[str, str]:
    """job id -> state, read in this process through the Prefect API its settings name (the
    rows `yoloq status --json` prints). Empty when that API does not answer or knows no such
    job: this process may point at another stack than the `cli` a caller polls."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import list_jobs

    try:
        with get_client(sync_client=True) as client:
            return {job.job_id: job.state for job in list_jobs(client, job_id)}
    except Exception:  # noqa: BLE001 - a cheap probe; the CLI is asked instead
        return {}


def wait_final(job_id: str, timeout_s: float = 900, cli=None) -> dict:
    """Wait until the job has ended; returns `yoloq status JOB --json` (through `cli`, default
    this stack's). Polled in this process while it sees the job: a CLI call per poll starts an
    interpreter and imports Prefect, about a core's worth of CPU on a 2-core host."""
    cli = cli or yoloq
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = job_states_here(job_id).get(job_id)
        if seen is None or seen in FINAL_STATES:
            out = cli("status", job_id, "--json")
            if out.returncode == 0:
                status = json.loads(out.stdout)
                if status["state"] in FINAL_STATES:
                    return status
        time.sleep(2)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s}s")


def segment_pid(flow_run_id) -> int:
    """The PID of a running segment (its node agent records it under the state folder)."""
    from work_pools.processes import recorded_pid

    pid = recorded_pid(flow_run_id)
    assert pid is not None, f"no PID recorded for segment {flow_run_id}"
    return pid


def freeze(flow_run_id) -> int:
    """SIGSTOP a running segment (as a hung data loader would stop it); returns its PID."""
    pid = segment_pid(flow_run_id)
    os.kill(pid, signal.SIGSTOP)
    return pid


def thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)



@contextmanager
def worker_with(**env: str) -> Iterator[None]:
    """Restart the session's GPU worker with extra settings; restore the default one after."""
    from yoloq.ops.stack import restart_worker

    restart_worker({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        restart_worker()


def wait_for(predicate, what: str, timeout_s: float = 600, every_s: float = 0.5):
    """Poll `predicate` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def paused_worker(stack) -> Iterator[None]:
    """Nothing trains: the GPU worker is stopped (SIGSTOP) once its node is published."""
    from work_pools.nodes import live_pool_gpus
    from yoloq.ops.stack import _read_pid

    wait_for(live_pool_gpus, "the GPU worker's node", 300)
    group = os.getpgid(_read_pid(stack, "worker"))
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


def json_lines(text: str) -> list:
    """The rows a `--json` command printed, one JSON object per line (JSON Lines)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]

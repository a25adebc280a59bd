"""`yoloq up` / `down` on a second, private stack: idempotent up, no process left
behind, and a job submitted before `down` still completes after `up`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from stack_helpers import private_env, write_spec

pytestmark = [pytest.mark.service, pytest.mark.training]


def cli(home, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yoloq.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=private_env(home))


def stack_processes(home) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("YOLOQ_HOME") == str(home) and proc.environ().get("YOLOQ_STACK"):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_up_twice_down_leaves_nothing_and_state_survives(tmp_path, tiny_dataset):
    from yoloq.ops.stack import free_port

    home = tmp_path / "home"
    port = str(free_port())
    first = cli(home, "up", "--port", port)
    assert first.returncode == 0, first.stderr
    server_pid = (home / "pids" / "server.pid").read_text()
    second = cli(home, "up")
    assert second.returncode == 0, second.stderr
    assert (home / "pids" / "server.pid").read_text() == server_pid, "second up must not restart"

    spec = write_spec(tmp_path / "job.yaml", tiny_dataset, name="survivor", epochs=1, export=[])
    submitted = cli(home, "submit", str(spec), "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]

    started = time.monotonic()
    assert cli(home, "down").returncode == 0
    assert time.monotonic() - started < 20
    assert stack_processes(home) == [], "down must leave no process behind"

    assert cli(home, "up").returncode == 0
    try:
        deadline = time.monotonic() + 400
        state = None
        while time.monotonic() < deadline:
            out = cli(home, "status", job_id, "--json")
            if out.returncode == 0:
                state = json.loads(out.stdout)["state"]
                if state in ("Completed", "Failed", "Crashed", "Cancelled"):
                    break
            time.sleep(2)
        assert state == "Completed", state
    finally:
        cli(home, "down")
    assert stack_processes(home) == []


def test_network_guard_is_active_in_child_processes(tmp_path):
    """Every Python process the tests start refuses non-loopback connections."""
    log = tmp_path / "guard.log"
    code = ("import socket\n"
            "try:\n    socket.create_connection(('203.0.113.7', 80), timeout=2)\n"
            "except OSError as e:\n    print('refused', e)\n")
    env = {**os.environ, "YOLOQ_NETGUARD_LOG": str(log)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert "refused" in out.stdout and "netguard" in out.stdout
    assert "203.0.113.7" in log.read_text()

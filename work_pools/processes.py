"""Segment processes: start in their own session, kill the whole group, remember PIDs.

Warm segments (`work_pools.launcher`) are forked by the node's launcher, not by the agent:
the same functions apply to them by PID (they lead their own session too).

PID files under `<state>/pids/segments/<node>/` let a restarted node agent (or
`yoloq down`) find segments a crashed agent of the same node left behind; agents of
other nodes sharing the state folder (several agents on one test host) never touch them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from uuid import UUID

import anyio
import anyio.abc

from yoloq.base.paths import state_paths


def _pid_dir(node: str) -> Path:
    path = state_paths().pids / "segments" / node
    path.mkdir(parents=True, exist_ok=True)
    return path


async def start(command: list[str], env: dict[str, str], cwd: Path,
                stream_output: bool) -> anyio.abc.Process:
    """Start a process in a new session (its own process group) so it can be killed whole."""
    out = None if stream_output else subprocess.DEVNULL
    return await anyio.open_process(command, env=env, cwd=str(cwd), stdout=out, stderr=out,
                                    start_new_session=True)


def kill_group(pid: int, grace_s: float = 3.0) -> bool:
    """SIGTERM the process group, then SIGKILL it after `grace_s`. True if anything was alive."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return False
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Exited but not yet reaped: a warm segment is the launcher's child, not ours, and an
    orphan waits for init; either way nothing of it runs any more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def record_pid(flow_run_id: UUID, pid: int, node: str) -> None:
    (_pid_dir(node) / f"{flow_run_id}.pid").write_text(str(pid))


def forget_pid(flow_run_id: UUID, node: str) -> None:
    (_pid_dir(node) / f"{flow_run_id}.pid").unlink(missing_ok=True)


def leftover_pids(node: str) -> list[tuple[UUID, int]]:
    found = []
    for path in _pid_dir(node).glob("*.pid"):
        try:
            found.append((UUID(path.stem), int(path.read_text().strip())))
        except ValueError:
            path.unlink(missing_ok=True)
    return found


def recorded_pid(flow_run_id: UUID) -> int | None:
    """The PID recorded for a segment on any node of this state folder (tests, `yoloq down`)."""
    for path in (state_paths().pids / "segments").glob(f"*/{flow_run_id}.pid"):
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None
    return None

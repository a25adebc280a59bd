"""The node agent's side of warm starts: run the launcher, ask it for segments, learn
their exit codes.

`SegmentStarter.start_segment(env, cwd, stream_output)` returns something with `.pid`
and `await .wait() -> exit code`, like the cold path's process (`processes.start`).
`YOLOQ_WARM_START=0` starts every segment cold (`python -m work_pools.segment_engine`), as before.

A segment starts cold, with a warning in the agent's log every time, when it cannot start
warm correctly or at all: its environment differs from the launcher's in a variable read at
import time (the launcher imported under the agent's environment), it runs in another
folder than the launcher's, or the launcher failed (it is restarted, at most once a
minute). Starting cold is the same engine in the same environment, only slower; a segment
that could not start at all would crash and be retried forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from work_pools import processes
from work_pools.launcher import MARKER_ENV, per_segment
from yoloq.settings import settings

PROJECT_DIR = Path(__file__).resolve().parent.parent
COLD_COMMAND = [sys.executable, "-m", "work_pools.segment_engine"]
WARM_ENV = "YOLOQ_WARM_START"
READY_TIMEOUT_S = settings().launcher_ready_s
RESTART_AFTER_S = 60.0   # a launcher that failed is tried again at most this often
LOST_EXIT = 1            # exit code reported when the launcher died before the segment


class LauncherError(RuntimeError):
    """The launcher is not there, not ready, or refused to fork."""


def warm_start_enabled() -> bool:
    return settings().warm_start_enabled


class LauncherClient:
    """One launcher process and its control socket; thread-safe, usable from any loop."""

    def __init__(self, env: dict[str, str], cwd: Path = PROJECT_DIR) -> None:
        self.env, self.cwd = dict(env), cwd
        self._sock, theirs = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "work_pools.launcher", "--fd", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), cwd=str(cwd), env=self.env, stdin=subprocess.DEVNULL,
            start_new_session=True)
        theirs.close()
        self.ready: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._next_id = 0
        self._spawns: dict[int, concurrent.futures.Future[int]] = {}
        self._exits: dict[int, concurrent.futures.Future[int]] = {}
        self._reader = threading.Thread(target=self._read, name="yoloq-launcher-reader",
                                        daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None and not self._sock_closed()

    def _sock_closed(self) -> bool:
        return self._sock.fileno() == -1

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        try:
            return self.ready.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise LauncherError(f"launcher not ready after {timeout_s:.0f} s") from None

    def spawn(self, env: dict[str, str], cwd: Path, stream_output: bool = True,
              module: str | None = None, argv: list[str] | None = None,
              timeout_s: float = 60.0) -> int:
        """Fork a segment; returns its PID (a session leader). Blocks until the launcher answers."""
        self.wait_ready()
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            self._spawns[request_id] = future
        request = {"id": request_id, "env": env, "cwd": str(cwd), "stream_output": stream_output,
                   "module": module, "argv": argv or []}
        try:
            self._sock.sendall((json.dumps(request) + "\n").encode())
        except OSError as exc:
            raise LauncherError(f"launcher unreachable: {exc}") from None
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise LauncherError(f"launcher did not answer within {timeout_s:.0f} s") from None

    def exit_future(self, pid: int) -> concurrent.futures.Future[int]:
        """Resolves with the segment's exit code (Popen's convention: -N for signal N)."""
        with self._lock:
            return self._exits.setdefault(pid, concurrent.futures.Future())

    def close(self, timeout_s: float = 10.0) -> int | None:
        """EOF tells the launcher to exit (running segments are left alone)."""
        try:  # shutdown first: the reader thread's pending recv keeps a bare close from ending it
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return self._proc.wait()

    # -- the reader thread -------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                self._dispatch(json.loads(line))
        self._lost()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            self.ready.set_result(message)
        elif "failed" in message:
            self.ready.set_exception(LauncherError(message["failed"]))
        elif "exit" in message:
            self.exit_future(message["exit"]).set_result(message["code"])
        else:
            with self._lock:
                future = self._spawns.pop(message["id"])
            if "pid" in message:
                self.exit_future(message["pid"])  # before anyone can wait for it
                future.set_result(message["pid"])
            else:
                future.set_exception(LauncherError(f"launcher refused to fork: {message['error']}"))

    def _lost(self) -> None:
        """The launcher is gone: fail what waits for it; watch its segments by pidfd."""
        code = self._proc.wait()
        gone = LauncherError(f"launcher exited (code {code})")
        if not self.ready.done():
            self.ready.set_exception(gone)
        with self._lock:
            spawns, self._spawns = list(self._spawns.values()), {}
            pending = [(pid, f) for pid, f in self._exits.items() if not f.done()]
        for future in spawns:
            future.set_exception(gone)
        for pid, future in pending:
            threading.Thread(target=_watch_orphan, args=(pid, future), daemon=True).start()


def _watch_orphan(pid: int, future: concurrent.futures.Future[int]) -> None:
    """Wait for a segment whose launcher died (its exit code is lost with the launcher)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        future.set_result(LOST_EXIT)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
    future.set_result(LOST_EXIT)


class WarmProcess:
    """A warm segment as the agent sees it: `.pid` and `await .wait()`, like anyio's Process."""

    def __init__(self, pid: int, exit_code: concurrent.futures.Future[int]) -> None:
        self.pid = pid
        self._exit_code = exit_code

    async def wait(self) -> int:
        return await asyncio.wrap_future(self._exit_code)


class SegmentStarter:
    """Starts a node's segments warm through its launcher, or cold when told to or forced to."""

    def __init__(self, logger: Any, cwd: Path = PROJECT_DIR) -> None:
        self._logger, self._cwd = logger, cwd
        self.warm = warm_start_enabled()
        self._client: LauncherClient | None = None
        self._launched_at = 0.0
        if self.warm:
            self._launch()
        else:
            self._logger.info("segments start cold (%s=0)", WARM_ENV)

    def _launch(self) -> None:
        self._client = LauncherClient(segment_base_env(), self._cwd)
        self._launched_at = time.monotonic()
        self._logger.info("warm launcher started (pid %d); segments fork from it", self._client.pid)

    @property
    def launcher_pid(self) -> int | None:
        return self._client.pid if self._client is not None else None

    async def start_segment(self, env: dict[str, str], cwd: Path, stream_output: bool) -> Any:
        if not self.warm:
            return await processes.start(COLD_COMMAND, env, cwd, stream_output)
        try:
            client = self._usable_client()
            reason = cold_reason(client.env, client.cwd, env, cwd)
            if reason is None:
                pid = await anyio.to_thread.run_sync(client.spawn, env, cwd, stream_output)
                return WarmProcess(pid, client.exit_future(pid))
            self._logger.warning("segment starts cold: %s", reason)
        except LauncherError as exc:
            self._logger.error("warm start failed (%s); this segment starts cold. Set %s=0 to "
                               "start every segment cold", exc, WARM_ENV)
        return await processes.start(COLD_COMMAND, env, cwd, stream_output)

    def _usable_client(self) -> LauncherClient:
        client = self._client
        if client is not None and client.alive():
            return client
        if client is not None and time.monotonic() - self._launched_at < RESTART_AFTER_S:
            raise LauncherError(f"launcher pid {client.pid} is down (restarted at most every "
                                f"{RESTART_AFTER_S:.0f} s)")
        if client is not None:
            self._logger.warning("warm launcher pid %d exited (code %s); restarting it",
                                 client.pid, client._proc.poll())
            client.close(timeout_s=1.0)
        self._launch()
        return self._client  # type: ignore[return-value]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def segment_base_env() -> dict[str, str]:
    """The environment every segment of this agent gets before its per-run values: the
    agent's own plus what Prefect's worker adds to every run (its current settings as
    variables, `BaseJobConfiguration._base_environment`). The launcher imports under it."""
    from prefect.settings import get_current_settings

    return {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True)}


def cold_reason(launcher_env: dict[str, str], launcher_cwd: Path, env: dict[str, str],
                cwd: Path) -> str | None:
    """Why a segment with this environment and folder cannot fork from this launcher."""
    if Path(cwd).resolve() != Path(launcher_cwd).resolve():
        return f"its folder {cwd} is not the launcher's ({launcher_cwd})"
    differ = sorted(k for k in set(env) | set(launcher_env)
                    if not per_segment(k) and k != MARKER_ENV and env.get(k) != launcher_env.get(k))
    if differ:
        return ("its environment differs from the launcher's (read at import time) in "
                + ", ".join(differ[:8]) + (" ..." if len(differ) > 8 else ""))
    return None

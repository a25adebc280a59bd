"""The embedded stack: Prefect server, pools and deployments, the job runner and the GPU worker.

Every process is started in its own session with its PID recorded under
`<state>/pids/`, so `down` can stop whole process groups; a last sweep kills any
process whose environment names this state folder (segments orphaned by a
killed worker included). `up` is idempotent and recovers runs a previous
`down` interrupted, so nothing submitted is lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from yoloq.base import offline
from yoloq.base.errors import UserError
from yoloq.base.paths import PROJECT_DIR, StatePaths, state_paths
from yoloq.settings import settings

SERVICES = ("server", "runner", "worker", "api")
STOP_GRACE_S = 8.0
DRAIN_START_S = 30.0  # for the agent to release its lease and ask its segments (a loaded host)


@dataclass(frozen=True)
class Stack:
    paths: StatePaths
    port: int

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rest_port(self) -> int:
        """The yoloq REST API's port: `$YOLOQ_API_PORT`, else the Prefect port plus one."""
        return settings().api_port or self.port + 1

    @property
    def rest_url(self) -> str:
        """The yoloq REST API (OpenAPI docs at `/docs`)."""
        return f"http://127.0.0.1:{self.rest_port}"


def current_stack(port: int | None = None) -> Stack:
    paths = offline.apply()
    chosen = port or chosen_port(paths) or offline.PREFECT_PORT_DEFAULT
    return Stack(paths, chosen)


def stack_env(stack: Stack) -> dict[str, str]:
    """Environment for every yoloq process: offline settings, profile, API URL, state folder."""
    offline.apply(stack.paths)
    env = dict(os.environ)
    env.update({
        "YOLOQ_HOME": str(stack.paths.root),
        "YOLOQ_PORT": str(stack.port),
        "YOLOQ_PROJECT_DIR": str(PROJECT_DIR),
        "PREFECT_PROFILES_PATH": str(PROJECT_DIR / "profiles" / "profiles.toml"),
        "PREFECT_PROFILE": settings().profile or "local",
        "PREFECT_HOME": str(stack.paths.prefect_home),
        "PREFECT_API_URL": stack.api_url,
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_SERVER_API_PORT": str(stack.port),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")])),
    })
    return env


def use_stack(stack: Stack) -> None:
    """Point this process's Prefect client at the stack (before importing prefect)."""
    os.environ.update(stack_env(stack))


@contextmanager
def api_settings(stack: Stack) -> Iterator[None]:
    """Point this process's Prefect client at the stack, even if prefect was imported
    before (its settings are read at import; a stale URL would start a throwaway server)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value() == stack.api_url:  # already so: a settings copy costs ~0.2 s
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: stack.api_url}):
        yield


def up(port: int | None = None, echo=print) -> Stack:
    stack = current_stack(port)
    stack.paths.ensure()
    (stack.paths.root / "port").write_text(str(stack.port))
    env = stack_env(stack)
    fresh = not _running(stack, "server")
    if fresh:
        _refuse_taken_port(stack.port, "YOLOQ_PORT")
        _start(stack, "server", [sys.executable, "-m", "yoloq.ops.server", "--host", "127.0.0.1",
                                 "--port", str(stack.port)], env)
    _wait_healthy(stack, timeout_s=settings().server_start_s)  # a loaded host: more
    echo(f"Prefect server: {stack.ui_url} (state {stack.paths.prefect_home})")
    use_stack(stack)
    from yoloq.ops.deploy import ensure_pools_and_deployments, recover_interrupted

    with api_settings(stack):
        ensure_pools_and_deployments(env, echo)
        recover_interrupted(echo, root=stack.paths.root, runner_alive=_running(stack, "runner"),
                            worker_alive=_running(stack, "worker"))
    if not _running(stack, "runner"):
        _start(stack, "runner", [sys.executable, "-m", "work_pools.run_runner"], env)
    if not _running(stack, "worker"):
        _start(stack, "worker", [sys.executable, "-m", "work_pools.run_worker"], env)
    echo("job runner and yolo-gpu worker running")
    if not _running(stack, "api"):
        _refuse_taken_port(stack.rest_port, "YOLOQ_API_PORT")
        _start(stack, "api", [sys.executable, "-m", "yoloq.api", "--port", str(stack.rest_port)], env)
    _wait_api(stack, timeout_s=settings().server_start_s)
    echo(f"yoloq API: {stack.rest_url} (docs {stack.rest_url}/docs)")
    return stack


def port_taken(port: int) -> bool:
    """True when another process listens on (or holds) loopback `port`. Bound as servers bind
    (SO_REUSEADDR), so the TIME_WAIT connections a stopped server leaves behind do not count:
    a restart on the same port must work."""
    return not _binds(port, reuse_addr=True)


def _binds(port: int, reuse_addr: bool) -> bool:
    """Whether a socket can bind loopback `port` right now (released at once)."""
    import socket

    with socket.socket() as sock:
        if reuse_addr:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _refuse_taken_port(port: int, setting: str) -> None:
    """A server of ours must not start on a taken port: its health check would then be
    answered by the other process, and this stack would silently talk to someone else's."""
    if port_taken(port):
        raise UserError("port", f"127.0.0.1:{port} is already in use by another process",
                        f"stop it, or set {setting} to a free port")


def _wait_api(stack: Stack, timeout_s: float) -> None:
    """Until the REST API answers its health check (it imports FastAPI and Prefect first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _running(stack, "api"):
        if api_answers(f"{stack.rest_url}/v1"):
            return
        time.sleep(0.3)
    log = stack.paths.logs / "api.log"
    raise UserError("api", f"the yoloq API did not answer on {stack.rest_url}",
                    f"see {log}; is port {stack.rest_port} taken? set YOLOQ_API_PORT")


def down(echo=print, drain_timeout_s: float | None = None) -> int:
    """Stop everything `up` started for this state folder. Returns how many processes stopped.

    The REST API, the job runner and the node agent are stopped together; the agent drains
    while the Prefect server is still up (it releases the scheduler lease, its segments stop
    at their next epoch boundary with a checkpoint within one epoch plus the checkpoint, or
    `drain_timeout_s`, and the rest are stopped hard: `work_pools.drain`). The server stops
    last. What the drain did is echoed, one line a job."""
    stack = current_stack()
    stopped = _signal_services(stack, ("api", "runner"), signal.SIGTERM)
    stopped += _drain_worker(stack, drain_timeout_s, echo)
    stopped += _stop_services(stack, ("api", "runner"), signalled=True)
    stopped += _stop_services(stack, ("server",))
    for name in SERVICES:
        (stack.paths.pids / f"{name}.pid").unlink(missing_ok=True)
    stopped += sweep_processes(stack.paths.root)
    echo(f"stopped ({stopped} process group(s)); state kept in {stack.paths.root}")
    return stopped


def _signal_services(stack: Stack, names: tuple[str, ...], sig: signal.Signals) -> int:
    stopped = 0
    for name in names:
        pid = _read_pid(stack, name)
        if pid and _signal_group(pid, sig):
            stopped += 1
    return stopped


def _stop_services(stack: Stack, names: tuple[str, ...], signalled: bool = False) -> int:
    """SIGTERM each service's process group (unless `signalled` already), SIGKILL what is left
    after `STOP_GRACE_S`."""
    stopped = 0 if signalled else _signal_services(stack, names, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(_running(stack, n) for n in names):
        time.sleep(0.2)
    for name in names:
        pid = _read_pid(stack, name)
        if pid:
            _signal_group(pid, signal.SIGKILL)
    return stopped


def _drain_worker(stack: Stack, timeout_s: float | None, echo) -> int:
    """Stop the node agent, draining its segments first when the server can take the drain."""
    from work_pools import drain

    pid = _read_pid(stack, "worker")
    if not pid or not _running(stack, "worker"):
        return _stop_services(stack, ("worker",))
    since = time.time()
    draining = healthy(stack)
    if draining:
        drain.write_request(stack.paths.root, timeout_s)
        echo("draining: running segments stop at their next epoch boundary with a checkpoint"
             + (f" (at most {timeout_s:g} s)" if timeout_s is not None else ""))
    try:
        os.kill(pid, signal.SIGTERM)  # the agent alone: its launcher must outlive the drain
    except ProcessLookupError:
        pass
    while _running(stack, "worker"):
        planned = drain.read_deadline(stack.paths.root, since) if draining else None
        limit = (planned if planned is not None else since + DRAIN_START_S) + STOP_GRACE_S
        if time.time() > limit:
            break
        time.sleep(0.2)
    stopped = _stop_services(stack, ("worker",)) + 1
    report = drain.read_report(stack.paths.root, since) if draining else None
    if report is not None:
        for line in drain.report_lines(report):
            echo(line)
    elif draining:
        echo("drain: the node agent did not report; its segments were stopped hard and resume "
             "from their last checkpoints")
    return stopped


def sweep_processes(root: Path) -> int:
    """SIGKILL every process (but this one and its ancestors) started for this state folder."""
    import psutil

    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    killed = 0
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in mine:
            continue
        try:
            if proc.environ().get("YOLOQ_HOME") == str(root) and proc.environ().get("YOLOQ_STACK") == "1":
                proc.kill()
                killed += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return killed


def _start(stack: Stack, name: str, command: list[str], env: dict[str, str]) -> int:
    log = open(stack.paths.logs / f"{name}.log", "ab")
    child_env = {**env, "YOLOQ_STACK": "1"}
    proc = subprocess.Popen([c for c in command if c], cwd=PROJECT_DIR, env=child_env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    (stack.paths.pids / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _wait_healthy(stack: Stack, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if healthy(stack):
            return
        if not _running(stack, "server"):
            break
        time.sleep(0.3)
    log = stack.paths.logs / "server.log"
    tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
    raise UserError("server", f"Prefect server did not become healthy on {stack.api_url}",
                    f"see {log}; last lines: {tail.strip().splitlines()[-1:] or ['(none)']}")


def healthy(stack: Stack) -> bool:
    return api_answers(stack.api_url)


def api_answers(api_url: str, timeout_s: float = 1.0) -> bool:
    """True when a Prefect API (or the yoloq API's `/v1`) answers its health check at `api_url`."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:
        return False


def _running(stack: Stack, name: str) -> bool:
    pid = _read_pid(stack, name)
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return True


def _read_pid(stack: Stack, name: str) -> int | None:
    path = stack.paths.pids / f"{name}.pid"
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _signal_group(pid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(os.getpgid(pid), sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def chosen_port(paths: StatePaths) -> int | None:
    """The Prefect port of this state folder's stack: `$YOLOQ_PORT`, else the one `up` saved."""
    return settings().port or _saved_port(paths)


def _saved_port(paths: StatePaths) -> int | None:
    try:
        return int((paths.root / "port").read_text().strip())
    except (OSError, ValueError):
        return None


def restart_worker(overrides: dict[str, str] | None = None, kill: bool = False) -> int:
    """Stop the GPU worker (SIGTERM, or SIGKILL of the worker process alone when `kill`)
    and start a new one with `overrides` in its environment. Returns the new PID."""
    stack = current_stack()
    pid = _read_pid(stack, "worker")
    if pid:
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)  # the worker only: its segments become orphans
            except ProcessLookupError:
                pass
        else:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and _running(stack, "worker"):
            time.sleep(0.1)
        _signal_group(pid, signal.SIGKILL) if not kill else None
    env = {**stack_env(stack), **(overrides or {})}
    return _start(stack, "worker", [sys.executable, "-m", "work_pools.run_worker"], env)


def free_port(span: int = 2) -> int:
    """A loopback port P with P..P+span-1 free (a stack serves Prefect on P and its API on P+1).

    Chosen below the kernel's ephemeral range: a port from that range can be taken as the
    source port of any outgoing connection between this check and the server's bind."""
    import random

    low_ephemeral = _ephemeral_floor()
    for _ in range(200):
        port = random.randrange(20000, low_ephemeral - span)
        if all(_binds(port + offset, reuse_addr=False) for offset in range(span)):
            return port
    raise UserError("ports", f"no {span} free consecutive loopback ports below {low_ephemeral}",
                    "set YOLOQ_PORT")


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands out as a source port (32768 where unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_FOREIGN_ENV = ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_PROFILE", "YOLO_CONFIG_DIR",
                "MPLCONFIGDIR", "YOLOQ_PORT")


@contextmanager
def private_stack(home: Path, declared_gpus: str = "1xCPU:8",
                  min_runtime_s: float = 0) -> Iterator[Stack]:
    """`up` in its own state folder and port (declared slots; no minimum runtime unless
    given), `down` after. For benchmarks: this process's environment is pointed at the stack."""
    for key in _FOREIGN_ENV:
        os.environ.pop(key, None)
    os.environ.update(YOLOQ_HOME=str(home), YOLOQ_PORT=str(free_port()),
                      YOLOQ_DECLARED_GPUS=declared_gpus,
                      YOLOQ_MIN_RUNTIME_S=f"{min_runtime_s:g}")
    stack = up(echo=lambda *a: None)
    try:
        yield stack
    finally:
        down(echo=lambda *a: None)

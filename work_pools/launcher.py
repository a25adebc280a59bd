"""The warm launcher: one pre-imported process per node that forks each segment.

A cold segment is `python -m work_pools.segment_engine` (Prefect's engine entry point): a
new interpreter that imports torch, ultralytics, prefect and the flow modules (several
seconds on a small host) before it trains. The launcher imports all of that once, at node start, and never initialises
CUDA (nor loads the driver). For each segment it forks a child that

- starts a session of its own (the node agent kills the whole group, as before),
- takes the requested environment (os.environ replaced, so CUDA_VISIBLE_DEVICES is set
  before anything touches CUDA), working folder and output (the agent's log, or nothing),
- reseeds Python's, numpy's and torch's global generators from the OS (a cold process would),
  refreshes Prefect's settings from the new environment, and
- runs what the cold command runs (the same module, as `__main__`), then exits
  as the interpreter would (threads joined, atexit handlers: Prefect flushes its logs and
  events there), without the final teardown of the inherited heap.

Still one process per segment (isolation, a clean kill, no CUDA context shared), only
without the interpreter start and the imports. Forking is safe only from a
single-threaded process: the launcher checks before every fork that it runs no other
Python thread and no native thread beyond a short list known to survive a fork
(`FORK_SAFE_THREADS`, numpy's BLAS pool), and refuses otherwise.

Protocol (JSON lines over a socket pair the agent passes as `--fd`):
launcher -> agent `{"ready": pid, "import_s": s}` or `{"failed": reason}` once; agent ->
launcher `{"id": n, "env": {...}, "cwd": "...", "stream_output": bool, "module": "...",
"argv": [...]}`; launcher -> agent `{"id": n, "pid": p}` or `{"id": n, "error": reason}`,
and later `{"exit": p, "code": c}` (c as Popen's returncode: -N for signal N). The segment
is the launcher's child, so only the launcher can read its exit status. On EOF (the agent
stopped or died) the launcher exits and leaves running segments alone: the agent stops
them, or a restarted agent kills them from their PID files.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import os
import random
import runpy
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

ENGINE_MODULE = "work_pools.segment_engine"  # prefect.engine, asking for the final state
# What a segment imports (module level and lazily), in import order.
PRELOAD = ("torch", "numpy", "prefect", "prefect.engine", "prefect.flow_engine",
           "prefect.client.orchestration", "prefect.deployments.steps", "ultralytics",
           "ultralytics.models.yolo.detect", "ultralytics.nn.tasks", "mlflow", "pandas",
           "flows.segment", "flows.stages", "yoloq.engine", "yoloq.engine.trainer",
           "yoloq.engine.metrics", "yoloq.engine.checkpoint", "yoloq.records.tracking",
           "yoloq.datasets", "yoloq.analysis.fingerprint", "yoloq.analysis.models",
           "yoloq.records.jobs", "yoloq.engine.evaluate", "yoloq.engine.export",
           # imported lazily by the segment before its first epoch (found by diffing
           # sys.modules in a forked child; over 1,100 modules, several seconds per segment):
           # the optimizer's torch._dynamo (sympy, triton, without touching CUDA), the NMS
           # of torchvision, thop and matplotlib for ultralytics' model summary and fonts,
           # MLflow's SQL store (SQLAlchemy models, alembic) for a sqlite:// tracking URI
           "torchvision", "torch._dynamo", "torch.onnx", "torch.utils.serialization", "thop",
           "matplotlib", "matplotlib.font_manager", "ultralytics.utils.callbacks.platform",
           "ultralytics.utils.events", "netrc", "yoloq.analysis.train_args",
           "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.model_registry.sqlalchemy_store")
# The bench's stub engine (`YOLOQ_BENCH_STUB_SEGMENT_S`, `flows.stub_segment`) trains nothing:
# its segments import neither torch nor ultralytics, so neither does its launcher.
STUB_SKIPS = ("torch", "ultralytics", "thop", "matplotlib", "yoloq.engine", "netrc")
STUB_PRELOAD = tuple(m for m in PRELOAD if not m.startswith(STUB_SKIPS))
# Set by the agent per segment and read only at run time: they may differ from the
# environment the launcher imported under. Any other difference starts the segment cold.
# `PREFECT__*` (two underscores) are Prefect's per-run values (run, flow, deployment and
# worker ids and names), not settings.
SEGMENT_KEYS = frozenset({"CUDA_VISIBLE_DEVICES", "YOLOQ_NODE_NAME", "YOLOQ_REDUCED_BATCH"})
SEGMENT_PREFIX = "PREFECT__"


def per_segment(key: str) -> bool:
    return key in SEGMENT_KEYS or key.startswith(SEGMENT_PREFIX)
MARKER_ENV = "YOLOQ_WARM_LAUNCHER"  # set in every warm segment: the launcher's PID
FORKED_AT_ENV = "YOLOQ_FORKED_AT"  # and when it was forked (time.time()): its setup timings


@dataclass
class Order:
    """What one forked child is to become."""

    env: dict[str, str]
    cwd: str
    stream_output: bool = True
    module: str = ENGINE_MODULE
    argv: list[str] = field(default_factory=list)
    forked_at: float = 0.0


# -- checks ----------------------------------------------------------------------------

# Native threads that survive a fork harmlessly, by name: pyarrow's jemalloc background
# threads (jemalloc re-initialises itself in a forked child) and polars' idle spill-folder
# cleaner (mlflow imports polars for its dataset type; a segment never calls polars). Both
# come with `import mlflow`, and a cold segment imports mlflow too.
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd", "polars-ooc-clea"})
_BLAS_THREADS = [0]  # numpy's BLAS pool (it shuts down around a fork), counted at import


def native_threads() -> list[str]:
    """Names of this process's OS threads other than the main one (Python's own count
    misses threads started in C)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
    return names


def unsafe_threads() -> int:
    """Threads a fork could break: Python threads, or native ones not known to be fork-safe."""
    others = [name for name in native_threads() if name not in FORK_SAFE_THREADS]
    return threading.active_count() - 1 + max(0, len(others) - _BLAS_THREADS[0])


def cuda_touched() -> str | None:
    """Why forking now would hand children a broken CUDA, or None."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch initialised CUDA"
    maps = Path("/proc/self/maps").read_text(errors="replace")
    if "libcuda.so" in maps:
        return "the CUDA driver (libcuda.so) is loaded"
    return None


def fork_refusal() -> str | None:
    """Why this process must not fork a segment now, or None."""
    threads = unsafe_threads()
    if threads:
        return (f"the launcher has {threads} thread(s) besides its main one that a fork "
                f"could break ({', '.join(native_threads())})")
    return cuda_touched()


# -- the launcher process ----------------------------------------------------------------

def preload(modules: tuple[str, ...] = PRELOAD) -> float:
    started = time.monotonic()
    importlib.import_module("numpy")
    _BLAS_THREADS[0] = len([n for n in native_threads() if n not in FORK_SAFE_THREADS])
    for name in modules:
        importlib.import_module(name)
    _configure_sql_models()
    return time.monotonic() - started


def _configure_sql_models() -> None:
    """SQLAlchemy configures its model classes (MLflow's store) on first use, per process:
    seconds of pure Python on a small host. Done here once, before any connection exists."""
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None:
        orm.configure_mappers()


def imported_after_fork() -> list[str]:
    """In a warm segment: the modules it imported itself (what the launcher could preload)."""
    return sorted(set(sys.modules) - _FORK_MODULES[0]) if _FORK_MODULES[0] else []


_FORK_MODULES: list[frozenset[str]] = [frozenset()]


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


def serve(sock: socket.socket) -> Order | None:
    """Answer spawn requests until EOF. Returns None in the launcher, an Order in a child."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    buffer = b""
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is wake_r:
                os.read(wake_r, 4096)
                continue
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                order = _handle(sock, json.loads(line))
                if order is not None:  # this is the child
                    return _become_child(order, sock, selector, (wake_r, wake_w))
        _reap(sock)


def _handle(sock: socket.socket, request: dict[str, Any]) -> Order | None:
    refusal = fork_refusal()
    if refusal is not None:
        _send(sock, {"id": request["id"], "error": refusal})
        return None
    order = Order(env=request["env"], cwd=request["cwd"],
                  stream_output=request.get("stream_output", True),
                  module=request.get("module") or ENGINE_MODULE, argv=request.get("argv") or [])
    ready_r, ready_w = os.pipe()
    # Everything the launcher holds (the imported modules) goes to the collector's permanent
    # generation: a child's collections (ultralytics calls gc.collect() at epoch ends) then scan
    # only its own objects, instead of the whole inherited heap, which also copied every page
    # of it (the collector writes to each object's header). Nothing of the launcher's is garbage.
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        order.forked_at = time.time()
        os.close(ready_r)
        os.setsid()  # before the agent learns the PID: it kills by process group
        os.close(ready_w)
        return order
    os.close(ready_w)
    os.read(ready_r, 1)  # EOF once the child has its own session (or died)
    os.close(ready_r)
    _send(sock, {"id": request["id"], "pid": pid})
    return None


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _become_child(order: Order, sock: socket.socket, selector: selectors.BaseSelector,
                  pipes: tuple[int, int]) -> Order:
    """Drop everything of the launcher's: signals, its control socket, its pipes."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    selector.close()
    sock.close()
    for fd in pipes:
        os.close(fd)
    return order


def become_segment(order: Order) -> NoReturn:
    """Turn this forked child into the segment, run it, exit with its code."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    if not order.stream_output:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    os.close(devnull)
    os.chdir(order.cwd)
    launcher_pid = os.getppid()
    os.environ.clear()
    os.environ.update(order.env)
    added, removed = _IMPORT_ENV
    os.environ.update(added)
    for key in removed:
        os.environ.pop(key, None)
    os.environ[MARKER_ENV] = str(launcher_pid)
    os.environ[FORKED_AT_ENV] = repr(order.forked_at)
    _FORK_MODULES[0] = frozenset(sys.modules)
    sys.modules.setdefault("work_pools.launcher", sys.modules[__name__])  # ran as __main__
    _reseed()
    _refresh_prefect()
    sys.argv = [sys.argv[0], *order.argv]
    _finish(_run_main(order.module))


def _run_main(module: str) -> int:
    """Run `python -m module` in this process; its exit code, as the interpreter would give it."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process, as in Python
        traceback.print_exc()
        return 1
    return 0


def _finish(code: int) -> NoReturn:
    """Exit as the interpreter does (join threads, atexit handlers: Prefect's logs and events
    are flushed there, flush stdio), but skip the final teardown of every module and object:
    in a forked child it touches the whole inherited heap (copy-on-write) and took 6-9 s."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _reseed() -> None:
    """A cold process seeds Python's, numpy's and torch's global generators from the OS;
    every child would otherwise share the launcher's. (The engine seeds all of them from
    (seed, epoch) at every epoch; this keeps what runs before that as a cold process has it.)
    `torch.seed()` queues the CUDA generators' seed for CUDA's first use: nothing starts."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()


def _refresh_prefect() -> None:
    """Prefect reads its settings at import: rebuild them from the child's environment."""
    context = sys.modules.get("prefect.context")
    if context is not None:
        context.refresh_global_settings_context()


def env_changes(before: dict[str, str], after: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """What the imports did to os.environ (ultralytics sets a few variables): a cold
    segment's imports would do the same to its environment, so children get it too."""
    added = {k: v for k, v in after.items() if before.get(k) != v and not per_segment(k)}
    removed = [k for k in before if k not in after and not per_segment(k)]
    return added, removed


_IMPORT_ENV: tuple[dict[str, str], list[str]] = ({}, [])


def main(argv: list[str] | None = None) -> None:
    global _IMPORT_ENV
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="the agent's end of the socket pair")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    before = dict(os.environ)
    try:
        from yoloq.settings import settings

        import_s = preload(STUB_PRELOAD if settings().bench_stub_segment_s else PRELOAD)
        _IMPORT_ENV = env_changes(before, dict(os.environ))
    except Exception as exc:  # noqa: BLE001 - reported to the agent, which logs it, starts cold
        _send(sock, {"failed": f"preload failed: {type(exc).__name__}: {exc}"})
        sys.exit(1)
    refusal = fork_refusal()
    if refusal is not None:
        _send(sock, {"failed": f"after the imports {refusal}"})
        sys.exit(1)
    _send(sock, {"ready": os.getpid(), "import_s": round(import_s, 2)})
    order = serve(sock)
    if order is None:  # EOF: nothing to flush, and a full interpreter shutdown is slow
        os._exit(0)
    become_segment(order)


if __name__ == "__main__":
    main()

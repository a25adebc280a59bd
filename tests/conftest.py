"""Session-wide test setup: an isolated state folder, the offline environment,
and the network guard (every Python process the tests start refuses and records
non-loopback connections). A record fails the test during which it was made, and
any record at all (made while session or module fixtures started or stopped a
stack, at teardown, by a leftover process) fails the whole run at its end."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

_NETGUARD_DIR = Path(__file__).parent / "netguard"
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="yoloq-tests-"))
_NETGUARD_LOG = _SESSION_DIR / "netguard.log"

# Before anything imports prefect, mlflow or ultralytics.
os.environ["YOLOQ_HOME"] = str(_SESSION_DIR / "home")
os.environ["YOLOQ_NETGUARD_LOG"] = str(_NETGUARD_LOG)
# A `yoloq login` of this machine's user must not send the tests' CLI calls to that server.
os.environ["XDG_CONFIG_HOME"] = str(_SESSION_DIR / "config")
for _remote in ("YOLOQ_SERVER", "YOLOQ_TOKEN"):
    os.environ.pop(_remote, None)
# One intra-op thread per training process: on a 2-core machine two tests train at once, and
# OpenMP threads spinning over each other slow both (every process of a test inherits this).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A server started while both workers run stacks has taken over the default 90 s on a slow CI
# host (still "Waiting for application startup"): the tests allow it more.
os.environ.setdefault("YOLOQ_SERVER_START_S", "300")
# Upload a checkpoint every epoch (the default chooses by cost, which on these tiny jobs means
# rarely): the fault tests count the epochs a crash makes a job retrain.
os.environ.setdefault("YOLOQ_CHECKPOINT_EVERY", "1")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_NETGUARD_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
_NETGUARD_LOG.touch()
sys.path.insert(0, str(_NETGUARD_DIR))
import sitecustomize as _netguard  # noqa: E402  (this process too)

if not getattr(_netguard, "_LOG", None):
    _netguard._LOG = str(_NETGUARD_LOG)
    _netguard._install()

from yoloq.base import offline  # noqa: E402

offline.apply()


_ATTRIBUTED: list[tuple[int, int, str]] = []  # (start, end, test id) of log spans already blamed


@pytest.fixture(autouse=True)
def _no_network_escapes(request):
    """Fail the test if it (or any process it started) tried a non-loopback connection."""
    before = _NETGUARD_LOG.stat().st_size
    yield
    with open(_NETGUARD_LOG) as fh:
        fh.seek(before)
        escapes = fh.read()
    if escapes.strip():
        _ATTRIBUTED.append((before, before + len(escapes.encode()), request.node.nodeid))
        pytest.fail(f"non-loopback network access attempted:\n{escapes.strip()[:3000]}")


@pytest.fixture(autouse=True)
def _environment_restored():
    """Undo what a test left in os.environ (`cli.main(["--home", D, ...])` sets YOLOQ_HOME in
    this process): a later test on the session stack must not read another test's state folder."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


def unattributed_escapes(log: Path, attributed: list[tuple[int, int, str]]) -> str:
    """The guard log's text outside the spans already blamed on a test."""
    data = log.read_bytes()
    keep = bytearray()
    position = 0
    for start, end, _ in sorted(attributed):
        keep += data[position:start]
        position = max(position, end)
    keep += data[position:]
    return keep.decode(errors="replace").strip()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist controller: tell each worker where to report escapes outside its tests."""
    node.workerinput["yoloq_netguard_reports"] = str(_SESSION_DIR)


# With `--dist loadfile` a file runs on one worker, and xdist's own order (files by test count)
# started the few-test, longest files last, leaving the other worker idle until they ended. The
# load scenario (about 1,000 s of one worker in CI) starts first; the node scenarios (about
# 900 s) come after the other stack files, so that they do not run beside it: together the two
# pools starved the server so long that a leader's lease renewal came too late.
FIRST, AFTER_THE_STACK_FILES = "test_cluster_load.py", "test_cluster_nodes.py"


def file_order(item: pytest.Item) -> int:
    """The load scenario, files that start a stack, the node scenarios, training, the rest."""
    name = item.path.name
    if name == FIRST:
        return 0
    if name == AFTER_THE_STACK_FILES:
        return 2
    if item.get_closest_marker("service"):
        return 1
    if item.get_closest_marker("training") or item.get_closest_marker("integration"):
        return 3
    return 4


def pytest_collection_modifyitems(session, config, items):
    """Order the files for xdist (`--no-loadscope-reorder` keeps this order; its default sorts
    files by test count, which puts the few-test, longest files last). Stable within a file."""
    first = {}
    for item in items:
        first[item.path] = min(first.get(item.path, 99), file_order(item))
    items.sort(key=lambda item: first[item.path])


def pytest_sessionfinish(session, exitstatus):
    _fail_on_network_escapes(session)
    _remove_session_dir_if_passed(session)


def _remove_session_dir_if_passed(session) -> None:
    """The session folder (stack state, checkpoints, datasets) holds 1-3 GB after a full run:
    removed when this process's run passed, kept (and named) when it failed or when
    YOLOQ_KEEP_TEST_DIR is set. Leaving them all behind filled a disk over a day's runs."""
    import shutil

    if session.exitstatus != 0 or os.environ.get("YOLOQ_KEEP_TEST_DIR"):
        print(f"\nyoloq tests: session folder kept: {_SESSION_DIR}", file=sys.stderr)
        return
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


def _fail_on_network_escapes(session) -> None:
    """Fail the run if any process tried a non-loopback connection at any time, fixtures and
    teardown included (the per-test check cannot see those). Under pytest-xdist each worker
    writes its report into the controller's folder, and the controller fails the run."""
    reports = sorted(_SESSION_DIR.glob("netguard-report-*.txt"))
    if reports:
        print("\n" + "\n".join(r.read_text() for r in reports), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not _NETGUARD_LOG.exists() or _NETGUARD_LOG.stat().st_size == 0:
        return
    blamed = ", ".join(sorted({nodeid for _, _, nodeid in _ATTRIBUTED}))
    rest = unattributed_escapes(_NETGUARD_LOG, _ATTRIBUTED)
    report = [f"yoloq netguard: non-loopback network access was attempted during this run "
              f"(log: {_NETGUARD_LOG})"]
    if blamed:
        report.append(f"  failed tests: {blamed}")
    if rest:
        report.append("  outside any test (session/module fixtures, teardown, leftovers):")
        report.extend("    " + line[:600] for line in rest.splitlines()[:20])
    print("\n" + "\n".join(report), file=sys.stderr)
    controller = getattr(session.config, "workerinput", {}).get("yoloq_netguard_reports")
    if controller:
        worker = session.config.workerinput.get("workerid", "worker")
        (Path(controller) / f"netguard-report-{worker}.txt").write_text("\n".join(report))
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session")
def netguard_log() -> Path:
    return _NETGUARD_LOG


@pytest.fixture(scope="session")
def yoloq_stack():
    """One real embedded stack per test session: Prefect server (SQLite), pools, deployments,
    job runner and yolo-gpu worker with one declared CPU slot. Stopped at the end."""
    from yoloq.ops import stack as stack_mod

    os.environ.setdefault("YOLOQ_DECLARED_GPUS", "1xCPU:8")
    os.environ.setdefault("YOLOQ_MIN_RUNTIME_S", "0")
    os.environ["YOLOQ_PORT"] = str(stack_mod.free_port())
    try:
        stack = stack_mod.up(echo=lambda *a: None)
    except BaseException:  # a half-started stack (e.g. a server too slow to answer) is stopped
        stack_mod.down(echo=lambda *a: None)
        raise
    from prefect.settings import PREFECT_API_URL, temporary_settings

    try:
        # Prefect reads its settings at import: pin this process's client to the stack.
        with temporary_settings(updates={PREFECT_API_URL: stack.api_url}):
            yield stack
    finally:
        stack_mod.down(echo=lambda *a: None)


@pytest.fixture(scope="session")
def tiny_dataset(session_dir: Path) -> Path:
    """A small real detection dataset (coloured shapes) shared by the training tests."""
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(session_dir / "shapes", train=8, val=4, imgsz=64, seed=0)


# ------------------------------------------------------------------ logs beside a failure

_LOG_SIGNS = re.compile(r"Traceback|Error|ERROR|CRITICAL|Crashed|Failed|failed|refused|timed out")
_LOG_BUDGET = 6000  # characters of log excerpts per failed test (CI shows only part of its output)


def _recent_logs(roots: list[Path], since: float) -> list[Path]:
    found = []
    for root in roots:
        if root.is_dir():
            found += [p for p in root.rglob("*.log") if p.is_file() and p.stat().st_mtime >= since]
    return sorted(set(found), key=lambda p: p.stat().st_mtime, reverse=True)


def _excerpt(log: Path) -> str:
    """The last lines of `log` that look like trouble, and its last lines."""
    lines = log.read_text(errors="replace").splitlines()
    signs = [line for line in lines if _LOG_SIGNS.search(line)][-8:]
    tail = [line for line in lines[-4:] if line not in signs]
    return "\n".join(f"  {line[:300]}" for line in signs + tail)


def failure_logs(roots: list[Path], since: float) -> str:
    """Excerpts of the stack logs written during a failed test, newest first, within budget."""
    parts, used = [], 0
    for log in _recent_logs(roots, since):
        text = f"{log}:\n{_excerpt(log)}"
        if used + len(text) > _LOG_BUDGET:
            break
        parts.append(text)
        used += len(text)
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed stack test's report carries excerpts of the logs its processes wrote, so a CI
    failure (timeouts, a Failed job) can be read without the machine it ran on."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.when == "teardown":
        return
    roots = [_SESSION_DIR / "home" / "logs"]
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if tmp is not None:
        roots.append(Path(tmp))
    text = failure_logs(roots, item.stash.get(_STARTED, time.time()) - 1)
    if text:
        report.sections.append(("yoloq logs written during the test", text))


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STARTED] = time.time()

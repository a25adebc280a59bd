"""Session-wide test setup: an isolated state folder, the offline environment,
and the network guard (every Python process the tests start refuses and records
non-loopback connections; any record fails the test that made it)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

_NETGUARD_DIR = Path(__file__).parent / "netguard"
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="yoloq-tests-"))
_NETGUARD_LOG = _SESSION_DIR / "netguard.log"

# Before anything imports prefect, mlflow or ultralytics.
os.environ["YOLOQ_HOME"] = str(_SESSION_DIR / "home")
os.environ["YOLOQ_NETGUARD_LOG"] = str(_NETGUARD_LOG)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_NETGUARD_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
_NETGUARD_LOG.touch()
sys.path.insert(0, str(_NETGUARD_DIR))
import sitecustomize as _netguard  # noqa: E402  (this process too)

if not getattr(_netguard, "_LOG", None):
    _netguard._LOG = str(_NETGUARD_LOG)
    _netguard._install()

from yoloq import offline  # noqa: E402

offline.apply()


@pytest.fixture(autouse=True)
def _no_network_escapes():
    """Fail the test if it (or any process it started) tried a non-loopback connection."""
    before = _NETGUARD_LOG.stat().st_size
    yield
    with open(_NETGUARD_LOG) as fh:
        fh.seek(before)
        escapes = fh.read().strip()
    if escapes:
        pytest.fail(f"non-loopback network access attempted:\n{escapes[:3000]}")


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
    from yoloq import stack as stack_mod

    os.environ.setdefault("YOLOQ_DECLARED_GPUS", "1xCPU:8")
    os.environ.setdefault("YOLOQ_MIN_RUNTIME_S", "0")
    os.environ["YOLOQ_PORT"] = str(stack_mod.free_port())
    stack = stack_mod.up(echo=lambda *a: None)
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
    from yoloq.synth import synth_dataset

    return synth_dataset(session_dir / "shapes", train=8, val=4, imgsz=64, seed=0)

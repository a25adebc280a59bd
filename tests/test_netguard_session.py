"""The network guard fails the whole run for an attempt no single test made: here a
module fixture tries a non-loopback connection before the per-test check starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

ESCAPING_MODULE = '''
import socket

import pytest


@pytest.fixture(scope="module")
def escapes():
    try:
        socket.create_connection(("192.0.2.1", 9), timeout=0.2)
    except OSError:
        pass
    yield


def test_passes_by_itself(escapes):
    assert True
'''

CLEAN_MODULE = '''
def test_clean():
    assert True
'''


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "YOLOQ_NETGUARD_LOG"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest",
                           "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_an_escape_in_a_module_fixture_fails_the_run(tmp_path):
    result = _run(tmp_path, ESCAPING_MODULE)
    assert "1 passed" in result.stdout, result.stdout[-2000:]  # no test is to blame...
    assert result.returncode == 1, result.stdout[-2000:]  # ...yet the run fails
    assert "outside any test" in result.stderr and "192.0.2.1" in result.stderr


def test_a_clean_run_passes(tmp_path):
    result = _run(tmp_path, CLEAN_MODULE)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]

"""Ports of a stack: chosen below the ephemeral range, and never shared with another process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from yoloq.base.errors import UserError
from yoloq.ops import mlflow_server
from yoloq.ops.stack import _ephemeral_floor, free_port, port_taken, up


def test_free_port_gives_two_free_ports_below_the_ephemeral_range():
    for _ in range(20):
        port = free_port()
        assert 20000 <= port < _ephemeral_floor() - 1
        assert not port_taken(port) and not port_taken(port + 1)


@pytest.fixture
def listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port(1)))
        sock.listen()
        yield sock.getsockname()[1]


def test_up_refuses_a_port_another_process_listens_on(listener, tmp_path, monkeypatch):
    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("YOLOQ_PORT", str(listener))
    with pytest.raises(UserError) as err:
        up(echo=lambda *a: None)
    assert err.value.field == "port" and str(listener) in err.value.problem
    assert "YOLOQ_PORT" in (err.value.fix or "")
    assert not (tmp_path / "home" / "pids" / "server.pid").exists(), "no server was started"


def test_up_through_the_cli_names_the_port_in_one_line(listener, tmp_path):
    env = {"YOLOQ_HOME": str(tmp_path / "home"), "YOLOQ_PORT": str(listener)}
    done = subprocess.run([sys.executable, "-m", "yoloq.cli", "up"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert done.returncode == 2
    assert f"port: 127.0.0.1:{listener} is already in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_mlflow_server_refuses_a_taken_port(listener, tmp_path):
    with pytest.raises(RuntimeError, match=f"port {listener} is already in use"):
        mlflow_server.start(listener, f"sqlite:///{tmp_path / 'm.db'}", str(tmp_path / "art"))


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free_again():
    """A server stopped with connections open leaves them in TIME_WAIT: restarting on the same
    port (yoloq up after down, an MLflow server restarted) must not be refused."""
    port = free_port(1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    server.close()
    with socket.socket() as plain:  # the kernel still holds the port for a plain bind
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert not port_taken(port)

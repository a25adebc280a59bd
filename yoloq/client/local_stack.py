"""The local operator credential: how this host's CLI reaches its own stack's yoloq API.

The API process of `yoloq up` writes `<state>/api-operator.json` (mode 0600) when it starts: its
loopback URL, the Prefect port of its stack and a fresh random secret; it removes the file when it
stops. Whoever can read the state folder already runs the stack (the local commands talk to its
Prefect server with no token), so holding the file is holding the operator's rights, no more.

A command that must be quick (`yoloq submit` of one job) calls `local_server()`: with the file
present and the API answering, it POSTs to the API, whose warm process analyses and creates the
job, and never imports Prefect (~1 s of the CLI's time). Without it (no stack, a stale file, the
user's own PREFECT_API_URL) the command takes the Prefect path, which names the stack's problem.
So it does when the command's settings differ from the API's (a `YOLOQ_TIER_CAPS` set for this
one shell, other S3 credentials): the API would check the job under its own, so the file holds a
digest of the settings the API started with, and the CLI compares its own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path

from yoloq.client.credentials import Server

FILE_NAME = "api-operator.json"
TOKEN_PREFIX = "yqop_"
USER_HEADER = "X-Yoloq-User"  # the OS user the operator acts for (the audit log's actor)
_LOOPBACK = {"", "0.0.0.0", "::", "127.0.0.1", "localhost"}
SETTING_PREFIXES = ("YOLOQ_", "AWS_")  # what a submit's analysis and checks may read
# where the stack and its API are, not how a job is checked (the stack sets them for its processes)
NOT_SETTINGS = frozenset({"YOLOQ_HOME", "YOLOQ_PORT", "YOLOQ_API_PORT", "YOLOQ_API_HOST", "YOLOQ_PROJECT_DIR",
                          "YOLOQ_SERVER", "YOLOQ_TOKEN", "YOLOQ_SERVER_START_S", "YOLOQ_STACK"})


def operator_file(root: Path | None = None) -> Path:
    from yoloq.base.paths import state_paths

    return (root or state_paths().root) / FILE_NAME


def publish(host: str, port: int, prefect_port: int, root: Path | None = None) -> str:
    """Write a fresh operator secret for the API at host:port; returns it (kept by the API)."""
    from yoloq.base.atomic import write_atomically

    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    reach = "127.0.0.1" if host in _LOOPBACK else host
    body = {"url": f"http://{reach}:{port}", "prefect_port": prefect_port, "token": token, "pid": os.getpid(),
            "host": socket.gethostname(), "settings": settings_digest(os.environ)}
    write_atomically(operator_file(root), lambda out: out.write(json.dumps(body).encode()), mode=0o600)
    return token


def withdraw(token: str, root: Path | None = None) -> None:
    """Remove the file if it is still this API's (a newer API may have replaced it)."""
    path = operator_file(root)
    saved = _read(path)
    if saved is not None and hmac.compare_digest(str(saved.get("token", "")), token):
        path.unlink(missing_ok=True)


def local_server(prefect_port: int | None) -> Server | None:
    """This host's stack API with the operator secret, or None when it is not there to use."""
    from yoloq.ops.stack import api_answers

    path = operator_file()
    saved = _read(path)
    if saved is None or (prefect_port is not None and saved.get("prefect_port") != prefect_port):
        return None
    if saved.get("host") != socket.gethostname():
        return None  # a state folder shared with another host: its loopback is not this one's
    if saved.get("settings") != settings_digest(os.environ):
        return None  # the API would analyse and check under other settings than this command's
    url, token = str(saved.get("url", "")), str(saved.get("token", ""))
    if not token.startswith(TOKEN_PREFIX) or not api_answers(f"{url}/v1", timeout_s=2.0):
        return None
    return Server(url, token, f"this host's stack ({path})")


def settings_digest(environ: Mapping[str, str]) -> str:
    """A digest of the environment settings a submit reads (`SETTING_PREFIXES`, not `NOT_SETTINGS`)."""
    chosen = sorted((k, v) for k, v in environ.items() if k.startswith(SETTING_PREFIXES) and k not in NOT_SETTINGS)
    return hashlib.sha256(json.dumps(chosen).encode()).hexdigest()


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

"""Every error the REST API returns has the one documented shape,
`{"detail": {"field", "problem", "fix", "message"}}`; the token is checked before the body is
parsed; a body over the limit is refused (413) without being read whole.

The real API app is served by a real uvicorn on loopback (its own process, the team store in
this test session's state folder). None of these requests reaches Prefect: each is refused
before its route runs, which is the point (the refusals that need a job are in test_api.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from stack_helpers import wait_for

from yoloq.api.guard import MAX_BODY_BYTES
from yoloq.ops.stack import free_port
from yoloq.records.teams import TeamStore

SHAPE = {"field", "problem", "fix", "message"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, team token, admin token) of the API app under uvicorn."""
    store = TeamStore()
    token = store.add(f"err-{uuid.uuid4().hex[:6]}")
    admin = store.add(f"err-admin-{uuid.uuid4().hex[:6]}", admin=True)
    port = free_port(1)
    env = {**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{free_port(1)}/api"}  # nothing there
    log = open(tmp_path_factory.mktemp("api") / "uvicorn.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "yoloq.api.app:create_app",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url), "the API server to answer", timeout_s=300)
        yield url, token, admin
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def shaped(resp: httpx.Response, status: int, field: str) -> dict:
    """The response's error body, after checking its status, shape and field."""
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, dict) and set(detail) == SHAPE, detail
    assert detail["field"] == field, detail
    assert detail["message"].startswith(f"{field}: {detail['problem']}"), detail
    return detail


def test_malformed_json_is_one_422_naming_the_body(server):
    url, token, _ = server
    resp = httpx.post(url + "/v1/jobs", content=b'{"name": "x",', timeout=30,
                      headers={**bearer(token), "Content-Type": "application/json"})
    detail = shaped(resp, 422, "body")
    assert "not valid JSON" in detail["problem"] and detail["fix"]


def test_a_wrong_type_names_the_dotted_field(server):
    url, token, _ = server
    resp = httpx.post(url + "/v1/jobs/some-job/tier", json={"tier": "low", "reason": {"a": 1}},
                      headers=bearer(token), timeout=30)
    detail = shaped(resp, 422, "reason")
    assert "string" in detail["problem"] and detail["fix"] == "send a string"


def test_a_query_of_the_wrong_type_names_query_and_field(server):
    url, token, _ = server
    resp = httpx.get(url + "/v1/jobs", params={"limit": "many"}, headers=bearer(token), timeout=30)
    shaped(resp, 422, "query.limit")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer yq_000000000000_wrong"}],
                         ids=["no-token", "wrong-token"])
def test_the_token_is_checked_before_the_body_is_parsed(server, headers):
    url, _, _ = server
    resp = httpx.post(url + "/v1/jobs", content=b"{not json", timeout=30,
                      headers={**headers, "Content-Type": "application/json"})
    shaped(resp, 401, "token")
    assert resp.headers["www-authenticate"] == "Bearer"


def test_a_team_token_on_an_admin_route_is_403_in_the_shape(server):
    url, token, _ = server
    shaped(httpx.post(url + "/v1/teams", json={"name": "x"}, headers=bearer(token), timeout=30), 403, "token")


def test_no_route_and_wrong_method_are_in_the_shape(server):
    url, token, _ = server
    missing = shaped(httpx.get(url + "/v1/nothing-here", headers=bearer(token), timeout=30), 404, "path")
    assert "/v1/nothing-here" in missing["problem"]
    wrong = shaped(httpx.put(url + "/v1/health", timeout=30), 405, "method")
    assert wrong["fix"] == "use GET"


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(server):
    """60 MB declared, a few KB sent: the 413 comes back at once (the server read no more)."""
    url, token, _ = server
    port = int(url.rsplit(":", 1)[1])
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {60 * 1024 * 1024}\r\n\r\n").encode()
    status, body = _exchange(port, head + b"[" * 4096)
    assert status == 413, body
    assert b'"field":"body"' in body and str(MAX_BODY_BYTES).encode() in body


def test_a_chunked_body_is_cut_at_the_limit(server):
    """A chunked upload with no length: the server answers 413 after about the limit, while
    the client still has most of its 60 MB to send."""
    url, token, _ = server
    port = int(url.rsplit(":", 1)[1])
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = 64 * 1024
    frame = f"{chunk:x}\r\n".encode() + b" " * chunk + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        sent = 0
        sock.setblocking(False)
        reply = b""
        deadline = time.monotonic() + 120
        while sent < 60 * 1024 * 1024 and time.monotonic() < deadline:
            try:
                sock.sendall(frame)  # non-blocking: raises once the server stops reading
                sent += chunk
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                time.sleep(0.05)
            try:
                reply += sock.recv(65536)
            except BlockingIOError:
                continue
            if b"\r\n\r\n" in reply:
                break
    assert reply.startswith(b"HTTP/1.1 413"), reply[:300]
    assert sent < 8 * MAX_BODY_BYTES, sent  # it was refused long before the 60 MB


def test_a_body_within_the_limit_still_reaches_the_route(server):
    url, token, _ = server
    padded = {"tier": "low", "reason": "x" * (MAX_BODY_BYTES // 2)}
    resp = httpx.post(url + "/v1/jobs/some-job/tier", json=padded, headers=bearer(token), timeout=60)
    assert resp.status_code != 413, resp.text  # past the guard (the route then needs Prefect)
    assert set(resp.json()["detail"]) == SHAPE


def _exchange(port: int, request: bytes) -> tuple[int, bytes]:
    """Send `request` and read the reply's status and body (the server may close early)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, reply.split(b"\r\n\r\n", 1)[-1]


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def test_an_unexpected_exception_is_a_500_in_the_shape_without_a_traceback():
    """The real app with one extra route that fails the way a bug would."""
    from fastapi.testclient import TestClient

    from yoloq.api.app import create_app

    app = create_app()

    def broken() -> None:
        raise RuntimeError("a bug with a secret path /srv/x")

    app.add_api_route("/broken", broken, methods=["GET"])
    with TestClient(app, raise_server_exceptions=False) as client:
        resp = client.get("/broken")
    detail = shaped(resp, 500, "server")
    assert "RuntimeError" in detail["problem"] and "Traceback" not in resp.text
    assert "/srv/x" not in resp.text

"""Prefect behind the door: on the cluster profile (Prefect on PostgreSQL, started by `yoloq up`)
the Prefect API refuses requests without its credentials, so a user cannot go around the
yoloq API; node agents given the credentials still join and heartbeat, and one without them
(or with wrong ones) stops at once with one line naming the setting."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import httpx
import pytest
from cluster_helpers import cluster_pool, live_nodes
from stack_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.service]


def _basic(auth: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}


def test_prefect_api_requires_credentials_and_agents_still_work(tmp_path):
    with cluster_pool(tmp_path, "a", "1xCPU:8") as pool:
        auth = pool.env["PREFECT_API_AUTH_STRING"]
        api = f"http://127.0.0.1:{pool.env['YOLOQ_PORT']}/api"
        assert httpx.get(f"{api}/health").status_code == 200, "health stays open (probes)"
        for headers in ({}, _basic("admin:wrong"), {"Authorization": "Bearer x"}):
            refused = httpx.post(f"{api}/flow_runs/filter", json={}, headers=headers)
            assert refused.status_code == 401, (headers, refused.text)
        allowed = httpx.post(f"{api}/flow_runs/filter", json={}, headers=_basic(auth))
        assert allowed.status_code == 200, allowed.text
        assert httpx.get(f"http://127.0.0.1:{pool.env['YOLOQ_PORT']}/ui-settings").json()["auth"] == "BASIC"

        pool.start_node("b", "1xCPU:8")  # `yoloq node` with the credentials from its environment
        wait_for(lambda: {n.name for n in live_nodes()} >= {"a", "b"}, "nodes a and b to heartbeat", 180)

        without = {k: v for k, v in pool.env.items() if not k.startswith("PREFECT_")}
        _assert_refused(without, "node", "--name", "c", needle="PREFECT_API_AUTH_STRING: is not set")
        wrong = {**without, "PREFECT_API_AUTH_STRING": "admin:wrong"}
        _assert_refused(wrong, "node", "--name", "c", needle="was refused by the Prefect API")
        # A user pointing the CLI at the Prefect API itself (the address is honoured) is refused too.
        direct = {k: v for k, v in without.items() if k != "YOLOQ_PORT"}
        _assert_refused({**direct, "PREFECT_API_URL": api}, "queue", needle="PREFECT_API_AUTH_STRING")
        assert "c" not in {n.name for n in live_nodes()}


def test_up_on_the_cluster_profile_refuses_without_server_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(YOLOQ_PROFILE="cluster", YOLOQ_HOME=str(tmp_path / "home"))
    out = _assert_refused(env, "up", needle="PREFECT_SERVER_API_AUTH_STRING: is not set")
    assert not (tmp_path / "home" / "pids" / "server.pid").exists(), "nothing was started"
    env.update(PREFECT_SERVER_API_AUTH_STRING="admin:one", PREFECT_API_AUTH_STRING="admin:two")
    _assert_refused(env, "up", needle="PREFECT_API_AUTH_STRING: differs")
    assert out.stdout == ""


def _assert_refused(env: dict[str, str], *args: str, needle: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "yoloq.cli", *args], check=False, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr, out.stderr[-2000:]
    return out

"""Settings that never vanish, on a real private stack: an environment variable set at `yoloq up`
beats the saved `yoloq-policy` block, `up` and `GET /v1/policy` say where each value came from,
the node agent resolves the same values, and `yoloq policy show|set` (local and over REST with
an admin token) reads and changes the stored policy.

The reproduction of the report: save the block through `team add --cap normal`, restart with
`YOLOQ_MIN_RUNTIME_S=0`; before, `GET /v1/policy` answered `"source": "block yoloq-policy",
"min_runtime_s": 300.0`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import psutil
import pytest
from stack_helpers import private_env

pytestmark = pytest.mark.service

ENV_KEY = "YOLOQ_MIN_RUNTIME_S"


def _env(home, **extra: str) -> dict[str, str]:
    from yoloq.settings import policy_env_names

    env = private_env(home)
    for name in policy_env_names().values():  # only what a test sets: the session's own stays out
        env.pop(name, None)
    return {**env, **extra}


def cli(home, *args: str, timeout: float = 400, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yoloq.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout, env=_env(home, **extra))


def token_of(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """The report's steps: up, `team add teama --cap normal` (saves the block), down, then up
    again with YOLOQ_MIN_RUNTIME_S=0. Yields (home, rest URL, admin token, team token, up's output)."""
    from yoloq.ops.stack import free_port

    home = tmp_path_factory.mktemp("precedence") / "home"
    port = str(free_port())
    first = cli(home, "up", "--port", port)
    try:
        assert first.returncode == 0, first.stderr
        team = token_of(cli(home, "team", "add", "teama", "--cap", "normal"))
        admin = token_of(cli(home, "team", "add", "ops", "--admin"))
        assert cli(home, "down").returncode == 0
        second = cli(home, "up", **{ENV_KEY: "0"})
        assert second.returncode == 0, second.stderr
        rest = f"http://127.0.0.1:{int(port) + 1}"
        yield home, rest, admin, team, second
    finally:
        cli(home, "down")


def test_env_at_up_beats_the_saved_block(restarted):
    home, rest, admin, _, _ = restarted
    policy = httpx.get(f"{rest}/v1/policy", headers={"Authorization": f"Bearer {admin}"}, timeout=60).json()
    assert policy["min_runtime_s"] == 0, policy
    assert policy["sources"]["min_runtime_s"] == f"env {ENV_KEY}"
    assert policy["tier_caps"] == {"teama": "normal"}  # the block's, still in force
    assert policy["sources"]["tier_caps"] == "block yoloq-policy"
    assert policy["sources"]["aging_step_s"] == "block yoloq-policy"
    assert policy["source"] == "block yoloq-policy + environment"


def test_up_prints_each_value_and_its_source(restarted):
    out = restarted[4].stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["min_runtime_s"] == ["0", "env", ENV_KEY], out
    assert rows["tier_caps"] == ["teama=normal", "block", "yoloq-policy"], out
    assert "already running" not in restarted[4].stderr


def test_the_node_agent_resolves_what_up_shows(restarted):
    """The node agent (the scheduler re-reads the policy every 30 s) runs with up's environment;
    resolving under that very environment gives the values `up` printed."""
    home = restarted[0]
    worker = psutil.Process(int((home / "pids" / "worker.pid").read_text()))
    env = worker.environ()
    assert env.get(ENV_KEY) == "0"
    code = ("from work_pools.scheduling import WorkerPolicy; from yoloq.commands._client import stack_client\n"
            "with stack_client():\n    p = WorkerPolicy.from_env()\n"
            "print(p.policy.min_runtime_s, p.policy.tier_caps['teama'].label, p.source)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env, cwd=worker.cwd())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.0", "normal", "block", "yoloq-policy", "+", "environment"]


def test_policy_set_then_show(restarted):
    home = restarted[0]
    changed = cli(home, "policy", "set", "aging_step_s=120", "soft_preemption=true", **{ENV_KEY: "0"})
    assert changed.returncode == 0, changed.stderr
    shown = json.loads(cli(home, "policy", "show", "--json", **{ENV_KEY: "0"}).stdout)
    assert (shown["aging_step_s"], shown["sources"]["aging_step_s"]) == (120, "block yoloq-policy")
    assert shown["soft_preemption"] is True
    # a key the stack's variable overrides: saved, but the variable still wins, and the answer says so
    overridden = cli(home, "policy", "set", "min_runtime_s=30", **{ENV_KEY: "0"})
    assert overridden.returncode == 0, overridden.stderr
    assert f"{ENV_KEY} of the stack overrides the block" in overridden.stderr
    shown = json.loads(cli(home, "policy", "show", "--json", **{ENV_KEY: "0"}).stdout)
    assert (shown["min_runtime_s"], shown["sources"]["min_runtime_s"]) == (0, f"env {ENV_KEY}")
    table = cli(home, "policy", "show", **{ENV_KEY: "0"}).stdout
    assert "aging_step_s" in table and "block yoloq-policy" in table
    assert max(len(line.rstrip()) for line in table.splitlines()) <= 80


@pytest.mark.parametrize("assignment, field", [
    pytest.param("bogus=1", "bogus", id="unknown-key"),
    pytest.param("min_runtime_s=-1", "min_runtime_s", id="out-of-range"),
    pytest.param("within_rank=las", "within_rank", id="not-a-choice"),
    pytest.param("quotas=1", "quotas", id="per-team-key"),
    pytest.param("aging_step_s", "aging_step_s", id="no-equals"),
])
def test_policy_set_refuses_a_bad_key_or_value_in_one_line(restarted, assignment, field):
    out = cli(restarted[0], "policy", "set", assignment)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {field}") and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "fix:" in out.stderr and "Traceback" not in out.stderr


def test_policy_set_over_rest_needs_an_admin_token(restarted):
    home, rest, admin, team, _ = restarted
    as_team = cli(home, "policy", "set", "aging_step_s=600", YOLOQ_SERVER=rest, YOLOQ_TOKEN=team)
    assert as_team.returncode == 2 and "admin" in as_team.stderr, as_team.stderr
    as_admin = cli(home, "policy", "set", "aging_step_s=600", "--json", YOLOQ_SERVER=rest, YOLOQ_TOKEN=admin)
    assert as_admin.returncode == 0, as_admin.stderr
    assert json.loads(as_admin.stdout)["aging_step_s"] == 600
    shown = json.loads(cli(home, "policy", "show", "--json", YOLOQ_SERVER=rest, YOLOQ_TOKEN=team).stdout)
    assert (shown["aging_step_s"], shown["sources"]["aging_step_s"]) == (600, "block yoloq-policy")
    refused = httpx.put(f"{rest}/v1/policy", json={"set": {"bogus": 1}}, timeout=60,
                        headers={"Authorization": f"Bearer {admin}"})
    assert refused.status_code == 422 and refused.json()["detail"]["field"] == "bogus"

"""The CLI from another machine: `yoloq login` and the user commands through the session stack's
REST API over real HTTP, with no state folder and no Prefect address on the client side (a local
call would fail). Also `--watch` redraws, `yoloq logs --follow` of a real job, and the
PREFECT_API_URL a user sets being the address the local commands use."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from stack_helpers import json_lines, wait_final, wait_for, write_spec

from yoloq.base.errors import UserError

stack_test = pytest.mark.service



def names_status(line: str, code: int) -> bool:
    """Whether an error line shows an HTTP status code, outside its URLs (a random port such as
    24016 is not a status) and outside ids and names (`a-4031` is not one either)."""
    return re.search(rf"(?<![\w-]){code}(?![\w-])", re.sub(r"https?://\S+", "", line)) is not None

def run_cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, (out.returncode, out.stdout[-500:], out.stderr[-1500:])
    return out.stdout


def one_line_error(out: subprocess.CompletedProcess, *needles: str) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-1500:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def team(yoloq_stack) -> tuple[str, str]:
    """A team added with `yoloq team add` on the server host; (name, token from the last line)."""
    name = f"remote-{uuid.uuid4().hex[:6]}"
    added = run_cli(dict(os.environ), "team", "add", name)
    assert added.returncode == 0, added.stderr
    return name, added.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def client_env(yoloq_stack, tmp_path_factory) -> dict[str, str]:
    """Another machine's environment: its own config folder, no state folder, no Prefect address."""
    home = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "YOLOQ_PORT", "YOLOQ_API", "YOLOQ_SERVER", "YOLOQ_TOKEN"))}
    env.update(XDG_CONFIG_HOME=str(home / "config"), YOLOQ_HOME=str(home / "no-state-here"))
    return env


@pytest.fixture(scope="module")
def logged_in(yoloq_stack, client_env, team) -> dict[str, str]:
    out = run_cli(client_env, "login", yoloq_stack.rest_url, "--token", team[1])
    assert out.returncode == 0, out.stderr
    assert f"as team {team[0]}" in out.stdout
    return client_env


@stack_test
def test_login_checks_the_token_and_saves_it_owner_only(yoloq_stack, client_env, team, logged_in):
    saved = Path(client_env["XDG_CONFIG_HOME"]) / "yoloq" / "credentials.toml"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert team[1] in saved.read_text() and yoloq_stack.rest_url in saved.read_text()
    other = {**client_env, "XDG_CONFIG_HOME": str(saved.parents[2] / "other-config")}
    one_line_error(run_cli(other, "login", yoloq_stack.rest_url, "--token", "yq_bad_token"),
                   "refused the token", "yoloq login")
    assert not (Path(other["XDG_CONFIG_HOME"]) / "yoloq" / "credentials.toml").exists(), "nothing saved"


@stack_test
def test_wrong_token_and_unreachable_server_are_one_line_errors(yoloq_stack, client_env):
    from yoloq.ops.stack import free_port

    wrong = {**client_env, "YOLOQ_SERVER": yoloq_stack.rest_url, "YOLOQ_TOKEN": "yq_nope_nope"}
    for command in (["queue"], ["status"], ["cancel", "nojob"], ["logs", "nojob"]):
        line = one_line_error(run_cli(wrong, *command), "token", "refused the token", "yoloq login")
        assert not names_status(line, 401), line  # the message, not the HTTP status
    dead = {**wrong, "YOLOQ_SERVER": f"http://127.0.0.1:{free_port()}"}
    one_line_error(run_cli(dead, "queue"), "no yoloq server answers", dead["YOLOQ_SERVER"])


@pytest.mark.service
@pytest.mark.training
def test_submit_status_queue_history_cancel_audit_through_the_api(logged_in, team, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "job.yaml", tiny_dataset, name="remote-cancel", team=team[0],
                      priority="low", epochs=30, segment_epochs=1)  # outlives the steps before the cancel
    out = run_cli(logged_in, "submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    submitted = json.loads(out.stdout)
    job_id = submitted["job_id"]
    assert submitted["analysis"]["name"] == "remote-cancel" and submitted["source"] == str(spec)

    status = json.loads(ok(run_cli(logged_in, "status", job_id, "--json")))
    assert status["job_id"] == job_id and status["team"] == team[0] and status["epochs"] == 30
    listing = run_cli(logged_in, "status")
    assert listing.returncode == 0 and job_id in listing.stdout and "EPOCHS" in listing.stdout
    assert isinstance(json_lines(ok(run_cli(logged_in, "queue", "--json"))), list)

    intruder = run_cli(dict(os.environ), "team", "add", f"{team[0]}-other").stdout.strip().splitlines()[-1]
    line = one_line_error(run_cli({**logged_in, "YOLOQ_TOKEN": intruder}, "cancel", job_id),
                          "error: team: this token belongs to team", team[0])
    assert not names_status(line, 403), line
    assert "Cancel" not in json.loads(ok(run_cli(logged_in, "status", job_id, "--json")))["state"]

    cancelled = run_cli(logged_in, "cancel", job_id, "--reason", "remote test")
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(f"cancelling {job_id} ("), cancelled.stderr
    final = wait_final(job_id, 300, cli=lambda *a: run_cli(logged_in, *a))
    assert final["state"] == "Cancelled", final
    history = run_cli(logged_in, "history", job_id)
    assert history.returncode == 0 and "submitted" in history.stdout, history.stderr
    wanted = {("yoloq.job.submitted", team[0]), ("yoloq.job.cancelled", team[0])}

    def acted() -> bool:  # the server stores events in batches, seconds later
        audit = json_lines(ok(run_cli(logged_in, "audit", "--job", job_id, "--json")))
        return {(row["event"], row["actor"].split("/")[0]) for row in audit} >= wanted

    wait_for(acted, f"{job_id}'s submitted and cancelled events, with the team as actor", 60, every_s=1)

    other = {**logged_in, "YOLOQ_TOKEN": "yq_other_token"}  # env wins over the saved token
    one_line_error(run_cli(other, "status", job_id), "refused the token")


@pytest.mark.service
@pytest.mark.training
def test_logs_follow_a_real_job_to_its_end_remote_and_local(yoloq_stack, logged_in, team, tiny_dataset,
                                                              tmp_path):
    spec = write_spec(tmp_path / "job.yaml", tiny_dataset, name="remote-logs", team=team[0], epochs=1,
                      segment_epochs=1, export=[])
    job_id = json.loads(ok(run_cli(logged_in, "submit", str(spec), "--json")))["job_id"]
    followed = run_cli(logged_in, "logs", job_id, "--follow", "--interval", "1", "--json", timeout=900)
    assert followed.returncode == 0, followed.stderr
    lines = [json.loads(line) for line in followed.stdout.splitlines()]
    trained = [line for line in lines if "epoch 1 done" in line["message"]]
    assert trained and trained[0]["run"].startswith(f"{job_id}.s1."), lines[-20:]  # the segment run's line
    assert len(lines) == len({line["id"] for line in lines}), "each log record once"
    local = subprocess.run([sys.executable, "-m", "yoloq.cli", "logs", job_id, "--json"], capture_output=True,
                           text=True, timeout=300, check=False)  # on the server host: Prefect directly
    assert local.returncode == 0, local.stderr
    messages = [json.loads(line)["message"] for line in local.stdout.splitlines()]
    assert any("epoch 1 done" in m for m in messages)
    page = httpx.get(f"{yoloq_stack.rest_url}/v1/jobs/{job_id}/logs", timeout=60,
                     headers={"Authorization": f"Bearer {team[1]}"}).json()
    ended = datetime.fromisoformat(page["ended"])  # what lets --follow skip the drain later
    assert page["finished"] and ended <= datetime.now(timezone.utc), page["ended"]


@stack_test
def test_watch_redraws_remote_and_local_and_ctrl_c_exits_cleanly(yoloq_stack, logged_in):
    remote = run_cli(logged_in, "queue", "--watch", "--interval", "0.5", "--count", "3")
    assert remote.returncode == 0 and remote.stdout.count("every 0.5s") == 3, remote.stdout + remote.stderr
    local = run_cli(dict(os.environ), "status", "--watch", "--interval", "0.5", "--count", "2")
    assert local.returncode == 0 and local.stdout.count("every 0.5s") == 2, local.stdout + local.stderr

    proc = subprocess.Popen([sys.executable, "-m", "yoloq.cli", "queue", "--watch", "--interval", "0.3"],
                            env=logged_in, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    deadline = time.monotonic() + 120
    while seen.count("every 0.3s") < 2 and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert seen.count("every 0.3s") >= 2, seen
    assert proc.returncode == 0 and "Traceback" not in err, err


@stack_test
def test_local_commands_use_the_prefect_address_the_user_set(yoloq_stack, client_env, tmp_path):
    """The reported bug: `PREFECT_API_URL=... yoloq queue` answered about 127.0.0.1:4210."""
    from yoloq.ops.stack import free_port

    client_env = {**client_env, "XDG_CONFIG_HOME": str(tmp_path / "no-login")}  # no yoloq server
    there = run_cli({**client_env, "PREFECT_API_URL": yoloq_stack.api_url}, "queue", "--json")
    assert there.returncode == 0 and isinstance(json_lines(there.stdout), list), there.stderr
    dead = f"http://127.0.0.1:{free_port()}/api"
    one_line_error(run_cli({**client_env, "PREFECT_API_URL": dead}, "queue"), dead, "PREFECT_API_URL")


def test_env_wins_over_the_saved_login_and_the_file_is_owner_only(tmp_path, monkeypatch):
    from yoloq.client import credentials

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for key in ("YOLOQ_SERVER", "YOLOQ_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    assert credentials.configured_server() is None, "no login: the commands stay local"
    path = credentials.save("http://queue:4211", 'to"ken')
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert credentials.configured_server() == credentials.Server("http://queue:4211", 'to"ken', str(path))
    monkeypatch.setenv("YOLOQ_TOKEN", "t2")
    assert credentials.configured_server().token == "t2"
    monkeypatch.setenv("YOLOQ_SERVER", "http://other:1/v1/")
    assert credentials.configured_server() == credentials.Server("http://other:1", "t2", "$YOLOQ_SERVER")
    monkeypatch.delenv("YOLOQ_TOKEN")
    with pytest.raises(UserError, match="YOLOQ_TOKEN: is not set"):
        credentials.configured_server()  # the saved token is for another server
    with pytest.raises(UserError, match="not an http"):
        credentials.normal_url("queue:4211")
    path.write_text("url = [")
    monkeypatch.delenv("YOLOQ_SERVER")
    with pytest.raises(UserError, match="cannot be read"):
        credentials.configured_server()


@pytest.mark.parametrize(("status", "body", "expected"), [
    pytest.param(401, {"detail": {"field": "token", "problem": "unknown, removed or rotated token",
                                  "fix": "ask", "message": "token: unknown"}},
                 "token: http://q:1 refused the token from $YOLOQ_SERVER: unknown, removed or rotated "
                 "token (fix: run `yoloq login http://q:1 --token TOKEN`", id="401"),
    pytest.param(403, {"detail": {"field": "team", "problem": "this token belongs to team 'a', not 'b'",
                                  "fix": "use b's own token", "message": "team: ..."}},
                 "team: this token belongs to team 'a', not 'b' (fix: use b's own token)", id="403"),
    pytest.param(422, {"detail": {"field": "batch", "problem": "-1 is ultralytics' autobatch",
                                  "fix": "give a positive batch", "message": "batch: ..."}},
                 "batch: -1 is ultralytics' autobatch (fix: give a positive batch)", id="422-yoloq-no-status"),
    pytest.param(422, {"detail": [{"loc": ["body", "epochs"], "msg": "must be > 0"}]},
                 "server: http://q:1 answered 422: epochs: must be > 0", id="422-fastapi"),
    pytest.param(502, "bad\ngateway", "server: http://q:1 answered 502: bad\\ngateway", id="text"),
])
def test_refusals_are_one_line_naming_the_fix(status, body, expected):
    import httpx

    from yoloq.client.credentials import Server
    from yoloq.client.remote import http_error

    response = httpx.Response(status, json=body) if not isinstance(body, str) else httpx.Response(status, text=body)
    line = http_error(response, Server("http://q:1", "t", "$YOLOQ_SERVER")).line()
    assert line.startswith(expected) and "\n" not in line, line
    if isinstance(body, dict) and isinstance(body["detail"], dict):
        assert f"({status})" not in line and f"{status}:" not in line, line  # the message only

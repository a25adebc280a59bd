"""The host's own CLI reaches its stack's yoloq API as the local operator: a one-job `yoloq submit`
is analysed and created by the warm API process, and the CLI never imports Prefect. The secret
lives in the state folder (owner-only), is refused when wrong, and only it may name an OS user
as the audit log's actor."""

from __future__ import annotations

import getpass
import json
import os
import socket
import stat
import subprocess
import sys

import httpx
import pytest
from stack_helpers import json_lines, wait_for, write_spec, yoloq

from yoloq.client.local_stack import FILE_NAME, USER_HEADER, settings_digest

stack_test = pytest.mark.service


def submit_with_importtime(*items: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`yoloq submit ITEMS` with `-X importtime`: its result and the top-level packages it imported."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "yoloq.cli", "submit", *items],
                         capture_output=True, text=True, timeout=300)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in out.stderr.splitlines() if line.startswith("import time:")}
    return out, imported


def job_ids(out: subprocess.CompletedProcess) -> list[str]:
    assert out.returncode == 0, (out.stdout[-500:], out.stderr[-1500:])
    return [line.split()[1] for line in out.stdout.splitlines() if line.startswith("submitted ")
            and not line.startswith("submitted 2 jobs")]


def submitted_event(job_id: str) -> dict:
    """The job's one `submitted` audit event (events reach the log a moment after the run)."""
    def read() -> list[dict]:
        out = yoloq("audit", "--job", job_id, "--json")
        assert out.returncode == 0, out.stderr[-1500:]
        return [row for row in json_lines(out.stdout) if row["event"].endswith("submitted")]

    (event,) = wait_for(read, f"{job_id}'s submitted event", 60, every_s=1)
    return event


def operator_secret(stack) -> dict:
    return json.loads((stack.paths.root / FILE_NAME).read_text())


@stack_test
def test_the_operator_secret_is_owner_only_and_names_the_stack_api(yoloq_stack):
    path = yoloq_stack.paths.root / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = operator_secret(yoloq_stack)
    assert saved["url"] == yoloq_stack.rest_url and saved["prefect_port"] == yoloq_stack.port
    assert saved["host"] == socket.gethostname()


@stack_test
def test_one_job_submit_goes_through_the_local_api_without_importing_prefect(yoloq_stack, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "one.yaml", tiny_dataset, name="local-op", epochs=1, export=[])
    out, imported = submit_with_importtime(str(spec))
    (job_id,) = job_ids(out)
    try:
        assert "prefect" not in imported and "torch" not in imported, sorted(imported)
        assert "httpx" in imported  # it did talk to the API
        event = submitted_event(job_id)
        assert event["actor"] == getpass.getuser(), event  # as a local command, not `@local/cli`
        assert event["reason"] == "yoloq submit", event
    finally:
        yoloq("cancel", job_id)


@stack_test
def test_a_batch_is_analysed_whole_by_the_cli_before_anything_is_created(yoloq_stack, tiny_dataset, tmp_path):
    """Two jobs take the Prefect path: every job is analysed here first, so one bad job would
    stop the batch with nothing created (the API creates one job per call)."""
    specs = [write_spec(tmp_path / f"b{i}.yaml", tiny_dataset, name=f"batch-{i}", epochs=1, export=[])
             for i in range(2)]
    out, imported = submit_with_importtime(*map(str, specs))
    created = job_ids(out)
    try:
        assert len(created) == 2 and "prefect" in imported
    finally:
        for job_id in created:
            yoloq("cancel", job_id)


@stack_test
def test_a_wrong_operator_secret_is_refused(yoloq_stack):
    forged = "yqop_" + "x" * 43
    answer = httpx.get(f"{yoloq_stack.rest_url}/v1/me", headers={"Authorization": f"Bearer {forged}"})
    assert answer.status_code == 401, answer.text
    right = operator_secret(yoloq_stack)["token"]
    answer = httpx.get(f"{yoloq_stack.rest_url}/v1/me",
                       headers={"Authorization": f"Bearer {right}", USER_HEADER: "alice"})
    assert answer.status_code == 200 and answer.json()["admin"] is True, answer.text


@stack_test
def test_a_team_token_cannot_name_another_user_as_its_actor(yoloq_stack, tiny_dataset, tmp_path):
    from yoloq.records.teams import TeamStore

    token = TeamStore().add("vision-hdr", label="laptop")
    spec = {"name": "hdr", "team": "vision-hdr", "priority": "normal", "model": "yolov8n.yaml",
            "data": str(tiny_dataset), "epochs": 1, "imgsz": 64, "batch": 4, "export": []}
    answer = httpx.post(f"{yoloq_stack.rest_url}/v1/jobs", json=spec, timeout=120,
                        headers={"Authorization": f"Bearer {token}", USER_HEADER: "mallory"})
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["job_id"]
    try:
        event = submitted_event(job_id)
        assert event["actor"] == "vision-hdr/laptop", event
        assert event["reason"] == "POST /v1/jobs", event
    finally:
        yoloq("cancel", job_id)


def test_no_operator_file_means_the_prefect_path(tmp_path, monkeypatch):
    """Without the file (no stack, or its API stopped) the CLI takes the Prefect path."""
    from yoloq.commands._client import local_api

    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert local_api() is None
    (tmp_path / FILE_NAME).write_text(json.dumps({"url": "http://127.0.0.1:9", "prefect_port": 1,
                                                  "token": "yqop_stale", "host": socket.gethostname(),
                                                  "settings": settings_digest(os.environ)}))
    monkeypatch.setenv("YOLOQ_PORT", "1")
    assert local_api() is None  # a stale file: nothing answers there
    assert (tmp_path / FILE_NAME).exists()  # it is not removed by a reader


@stack_test
def test_other_settings_in_the_shell_take_the_prefect_path(yoloq_stack, monkeypatch):
    """The API checks a job under the settings it started with; a command whose own differ (a tier
    cap set for one shell) must not be checked under the API's."""
    from yoloq.commands._client import local_api

    assert local_api() is not None
    monkeypatch.setenv("YOLOQ_TIER_CAPS", "interns=normal")
    assert local_api() is None
    monkeypatch.delenv("YOLOQ_TIER_CAPS")
    monkeypatch.setenv("YOLOQ_PORT", str(yoloq_stack.port + 100))  # another stack's port, same folder
    assert local_api() is None


@stack_test
def test_a_secret_file_written_on_another_host_is_not_used(yoloq_stack, tmp_path, monkeypatch):
    """A state folder shared between hosts: another host's loopback URL is not this one's."""
    from yoloq.commands._client import local_api

    saved = operator_secret(yoloq_stack)
    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path))
    (tmp_path / FILE_NAME).write_text(json.dumps(saved))
    assert local_api() is not None  # the same file on this host: used
    (tmp_path / FILE_NAME).write_text(json.dumps({**saved, "host": "another-host"}))
    assert local_api() is None

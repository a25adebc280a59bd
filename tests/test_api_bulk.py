"""`POST /v1/jobs/bulk` through a real HTTP client against the session stack.

The GPU worker is paused for the module (nothing trains); every job created is cancelled.
A refused batch must create nothing: no run of its names, no job in the team's list.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from stack_helpers import paused_worker, wait_for
from test_api import _make_tokens, _restore_policy, audit_rows, bearer, job_spec

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api(yoloq_stack):
    with paused_worker(yoloq_stack), httpx.Client(base_url=yoloq_stack.rest_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def tokens(yoloq_stack):
    from blocks.policy import saved_block

    before = saved_block()
    try:
        yield _make_tokens(yoloq_stack)
    finally:
        _restore_policy(before)


def runs_named(prefix: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=prefix)))
    return [r for r in runs if r.name.startswith(prefix)]


def batch(data, team: str, prefix: str, count: int, **extra) -> list[dict]:
    return [job_spec(data, team, f"{prefix}{i}", **extra) for i in range(count)]


def test_a_batch_creates_every_job_with_its_team_tags_and_events(tokens, api, tiny_dataset):
    audio, token = tokens["audio"]
    prefix = f"bulk-{uuid.uuid4().hex[:6]}-"
    resp = api.post("/v1/jobs/bulk", json=batch(tiny_dataset, audio, prefix, 3), headers=bearer(token))
    assert resp.status_code == 201, resp.text
    body = resp.json()
    try:
        assert body["created"] == 3 and len(set(body["job_ids"])) == 3
        assert [j.rsplit("-", 1)[0] for j in body["job_ids"]] == [f"{prefix}{i}" for i in range(3)]
        runs = {r.name: r for r in runs_named(prefix)}
        assert sorted(runs) == sorted(body["job_ids"])
        for job_id, run in runs.items():
            assert run.parameters["job_id"] == job_id and run.parameters["spec"]["team"] == audio
            assert f"team:{audio}" in run.tags and "tier:low" in run.tags
        listed = {j["job_id"] for j in api.get("/v1/jobs", params={"team": audio}, headers=bearer(token)).json()}
        assert set(body["job_ids"]) <= listed
        submitted = wait_for(lambda: (rows := [e for e in audit_rows(team=audio) if e["event"] == "yoloq.job.submitted"
                                               and e["job"] in body["job_ids"]]) and len(rows) == 3 and rows,
                             "three submitted events", 60)
        assert {e["actor"] for e in submitted} == {f"{audio}/default"}
    finally:
        for job_id in body["job_ids"]:
            api.delete(f"/v1/jobs/{job_id}", headers=bearer(token))


@pytest.mark.parametrize("bad, field", [
    ({"epochs": 0}, "jobs[1].epochs"),  # the spec itself
    ({"data": "/nonexistent/data.yaml"}, "jobs[1].data"),  # its analysis
    ({"imgsz": 100}, "jobs[1].imgsz"),
], ids=["spec", "dataset", "imgsz"])
def test_one_bad_spec_refuses_the_batch_and_creates_nothing(tokens, api, tiny_dataset, bad, field):
    audio, token = tokens["audio"]
    prefix = f"bad-{uuid.uuid4().hex[:6]}-"
    specs = batch(tiny_dataset, audio, prefix, 3)
    specs[1] = {**specs[1], **bad}
    resp = api.post("/v1/jobs/bulk", json=specs, headers=bearer(token))
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert detail["field"] == field
    assert "nothing was created" in detail["fix"] and "\n" not in detail["message"]
    assert runs_named(prefix) == []


def test_another_teams_token_is_403_and_creates_nothing(tokens, api, tiny_dataset):
    audio, _ = tokens["audio"]
    _, vision_token = tokens["vision"]
    prefix = f"theirs-{uuid.uuid4().hex[:6]}-"
    resp = api.post("/v1/jobs/bulk", json=batch(tiny_dataset, audio, prefix, 2), headers=bearer(vision_token))
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["field"] == "jobs[0].team"
    assert runs_named(prefix) == []


def test_a_tier_above_the_cap_anywhere_in_the_batch_is_403(tokens, api, tiny_dataset):
    vision, token = tokens["vision"]  # capped at normal
    prefix = f"cap-{uuid.uuid4().hex[:6]}-"
    specs = batch(tiny_dataset, vision, prefix, 3)
    specs[2] = {**specs[2], "priority": "urgent"}
    resp = api.post("/v1/jobs/bulk", json=specs, headers=bearer(token))
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["field"] == "jobs[2].priority"
    assert runs_named(prefix) == []


@pytest.mark.parametrize("body, field", [([], "jobs"), ({"name": "x"}, "body")], ids=["empty", "not-a-list"])
def test_an_empty_or_malformed_batch_is_422(tokens, api, body, field):
    _, token = tokens["audio"]
    resp = api.post("/v1/jobs/bulk", json=body, headers=bearer(token))
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"]["field"] == field


def test_without_a_token_the_batch_is_401(api, tiny_dataset):
    resp = api.post("/v1/jobs/bulk", json=batch(tiny_dataset, "audio", "anon-", 1))
    assert resp.status_code == 401, resp.text

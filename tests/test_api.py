"""The REST API through a real HTTP client against the session stack (`yoloq up` serves it).

Tokens come from the stack's own team store; the GPU worker is paused for the module, so the
jobs submitted here wait (nothing trains) until they are cancelled. Refused requests must change nothing: the job keeps its state
and tier and the audit log gains no event for it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import httpx
import pytest
import yaml
from stack_helpers import paused_worker, wait_for

from yoloq import cli
from yoloq.records.teams import TeamStore, store_path

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api(yoloq_stack):
    with paused_worker(yoloq_stack), httpx.Client(base_url=yoloq_stack.rest_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def tokens(yoloq_stack):
    """Tokens of two teams (vision capped at normal, weight 2) and an admin, made by the admin API.
    The scheduling policy block is put back as it was afterwards (other tests use the environment's)."""
    from blocks.policy import saved_block

    before = saved_block()
    try:
        yield _make_tokens(yoloq_stack)
    finally:
        _restore_policy(before)


def _make_tokens(yoloq_stack) -> dict:
    store = TeamStore(store_path(yoloq_stack.paths.root))
    suffix = uuid.uuid4().hex[:6]
    admin = store.add(f"ops-{suffix}", admin=True, label="alice")
    with httpx.Client(base_url=yoloq_stack.rest_url, timeout=120,
                      headers={"Authorization": f"Bearer {admin}"}) as client:
        made = {}
        for team, cap in ((f"vision-{suffix}", "normal"), (f"audio-{suffix}", None)):
            resp = client.post("/v1/teams", json={"name": team, "cap": cap, "weight": 2.0,
                                                  "owner": f"{team}@example.org"})
            assert resp.status_code == 201, resp.text
            made[team.split("-")[0]] = (team, resp.json()["token"])
    return {"admin": admin, **made}


def _restore_policy(before) -> None:
    from prefect.client.orchestration import get_client

    from blocks.policy import POLICY_BLOCK, SchedulingPolicy

    if before is not None:
        before.save(POLICY_BLOCK, overwrite=True)
        return
    with get_client(sync_client=True) as client:
        doc = client.read_block_document_by_name(POLICY_BLOCK, SchedulingPolicy.get_block_type_slug())
        client.delete_block_document(doc.id)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def job_spec(data, team: str, name: str, **extra) -> dict:
    spec = {"name": name, "team": team, "priority": "low", "model": "yolov8n.yaml", "data": str(data),
            "epochs": 2, "imgsz": 64, "batch": 4, "segment_epochs": 1,
            "train_args": {"seed": 0, "workers": 0, "plots": False}}
    return {**spec, **extra}


@pytest.fixture(scope="module")
def vision_job(api, tokens, tiny_dataset):
    """One job of team vision, submitted through the API (cancelled by the last test using it)."""
    team, token = tokens["vision"]
    resp = api.post("/v1/jobs", json=job_spec(tiny_dataset, team, "api-job"), headers=bearer(token))
    assert resp.status_code == 201, resp.text
    body = resp.json()
    yield body
    api.delete(f"/v1/jobs/{body['job_id']}", headers=bearer(token))


def audit_rows(**filters) -> list[dict]:
    from prefect.client.orchestration import get_client

    from yoloq.views.auditlog import read_audit

    with get_client(sync_client=True) as client:
        return read_audit(client, **filters)


def job_events(yoloq_stack, job_id: str) -> list[dict]:
    return audit_rows(job_id=job_id)


def team_events(team: str) -> list[dict]:
    return [e for e in audit_rows(team=team) if e["event"].startswith("yoloq.team.")]


def test_up_serves_the_api_with_openapi_docs(api):
    assert api.get("/v1/health").json()["status"] == "ok"
    assert api.get("/docs").status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/tier", "/v1/queue", "/v1/usage",
                 "/v1/policy", "/v1/teams"):
        assert path in paths


def test_submit_answers_with_id_analysis_and_position(vision_job, tokens, api, yoloq_stack):
    assert vision_job["job_id"].startswith("api-job-")
    assert vision_job["analysis"]["job_class"] and vision_job["position"] >= 1
    assert "eta" in vision_job
    team, token = tokens["vision"]
    listed = api.get("/v1/jobs", params={"team": team}, headers=bearer(token)).json()
    assert [j["job_id"] for j in listed] == [vision_job["job_id"]]
    submitted = wait_for(lambda: [e for e in job_events(yoloq_stack, vision_job["job_id"])
                                  if e["event"] == "yoloq.job.submitted"], "the submitted event", 60)
    assert submitted[0]["actor"] == f"{team}/default"  # the token's team and label, not the OS user


def _announce_paused_node() -> None:
    """The worker is paused (nothing trains), so its heartbeat stops: publish its node record
    again as it stands, with a fresh heartbeat, so a submit sees the pool's live GPU."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.nodes import publish, read_nodes

    async def announce() -> None:
        async with get_client() as client:
            for node in await read_nodes(client):
                await publish(client, replace(node, heartbeat_at=time.time()))

    run_coro_as_sync(announce())


def _segment_of(job_id: str):
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def test_submit_answers_with_a_provisional_eta_and_a_later_job_starts_no_earlier(tokens, api,
                                                                                tiny_dataset,
                                                                                yoloq_stack):
    team = f"eta-{uuid.uuid4().hex[:6]}"  # its own team: the other tests count vision's and audio's jobs
    token = TeamStore(store_path(yoloq_stack.paths.root)).add(team)
    answers = []
    try:
        for name in ("eta-first", "eta-second"):
            _announce_paused_node()
            submitted_at = time.time()
            resp = api.post("/v1/jobs", json=job_spec(tiny_dataset, team, name), headers=bearer(token))
            assert resp.status_code == 201, resp.text
            answers.append(body := resp.json())
            eta = body["eta"]
            assert isinstance(body["position"], int) and body["position"] >= 1
            assert eta is not None, body["eta_note"]
            assert eta["provisional"] is True and eta["basis"] == "forward run"
            assert eta["median_s"] >= submitted_at
            assert eta["low_s"] <= eta["median_s"] <= eta["high_s"]
            wait_for(lambda: _segment_of(body["job_id"]), f"{name}'s first segment", 600)
        first, second = (a["eta"] for a in answers)
        assert second["median_s"] >= first["median_s"]  # queued behind the first (same team and tier)
        _, other = tokens["vision"]  # every team's jobs are listed; acting on them is refused
        listed = {j["job_id"] for j in api.get("/v1/jobs", headers=bearer(other)).json()}
        assert {a["job_id"] for a in answers} <= listed
    finally:
        for body in answers:
            api.delete(f"/v1/jobs/{body['job_id']}", headers=bearer(token))


def test_show_has_state_epochs_segments_history_and_mlflow(vision_job, tokens, api):
    _, token = tokens["audio"]  # any team may read
    shown = api.get(f"/v1/jobs/{vision_job['job_id']}", headers=bearer(token))
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["epochs"] == 2 and body["tier"] == "low" and body["state"]
    assert body["history"][0]["what"] == "submitted"
    assert {"segment_runs", "mlflow"} <= set(body)
    assert "run_id" in body["mlflow"] or "error" in body["mlflow"]
    assert api.get("/v1/jobs/no-such-job", headers=bearer(token)).status_code == 404


@pytest.mark.parametrize("headers, status", [
    ({}, 401), ({"Authorization": "Bearer yq_000000000000_wrong"}, 401),
    ({"Authorization": "Basic abc"}, 401), ("other-team", 403)],
    ids=["missing", "wrong", "not-bearer", "another-team"])
def test_bad_tokens_change_nothing(vision_job, tokens, api, yoloq_stack, headers, status):
    if headers == "other-team":
        headers = bearer(tokens["audio"][1])
    job_id = vision_job["job_id"]
    before = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens["vision"][1])).json()
    assert before["state"] not in ("Cancelling", "Cancelled")
    assert api.delete(f"/v1/jobs/{job_id}", headers=headers).status_code == status
    assert api.post(f"/v1/jobs/{job_id}/tier", json={"tier": "normal"}, headers=headers).status_code == status
    after = api.get(f"/v1/jobs/{job_id}", headers=bearer(tokens["vision"][1])).json()
    assert after["tier"] == before["tier"] == "low"
    assert after["state"] not in ("Cancelling", "Cancelled")
    kinds = {e["event"] for e in job_events(yoloq_stack, job_id)}
    assert not kinds & {"yoloq.job.cancelled", "yoloq.job.tier_changed"}
    if status == 401:
        assert api.get("/v1/queue", headers=headers).status_code == 401
        assert api.post("/v1/jobs", json={}, headers=headers).status_code == 401


def test_a_rotated_token_is_refused_and_the_new_one_works(tokens, api, yoloq_stack):
    store = TeamStore(store_path(yoloq_stack.paths.root))
    team = f"tmp-{uuid.uuid4().hex[:6]}"
    old = store.add(team)
    assert api.get("/v1/me", headers=bearer(old)).json() == {"team": team, "label": "default", "admin": False}
    new = api.post(f"/v1/teams/{team}/rotate", headers=bearer(tokens["admin"])).json()["token"]
    assert api.get("/v1/me", headers=bearer(old)).status_code == 401
    assert api.get("/v1/me", headers=bearer(new)).status_code == 200
    assert api.delete(f"/v1/teams/{team}", headers=bearer(tokens["admin"])).status_code == 200
    assert api.get("/v1/me", headers=bearer(new)).status_code == 401
    changes = wait_for(lambda: (found := team_events(team)) and len(found) >= 2 and found,
                       "the team's audit events", 60)
    assert [(e["event"], e["actor"].split("/")[1]) for e in changes] == [
        ("yoloq.team.token_rotated", "alice"), ("yoloq.team.removed", "alice")]  # the admin's label


def _count(api, token, team) -> int:
    return len(api.get("/v1/jobs", params={"team": team}, headers=bearer(token)).json())


def test_a_spec_for_another_team_is_refused(tokens, api, tiny_dataset):
    _, token = tokens["vision"]
    audio, _ = tokens["audio"]
    before = _count(api, token, audio)
    resp = api.post("/v1/jobs", json=job_spec(tiny_dataset, audio, "not-mine"), headers=bearer(token))
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["field"] == "team"
    assert _count(api, token, audio) == before


def test_a_tier_above_the_cap_is_refused_on_the_server(vision_job, tokens, api, tiny_dataset):
    vision, token = tokens["vision"]  # capped at normal by the admin
    before = _count(api, token, vision)
    resp = api.post("/v1/jobs", json=job_spec(tiny_dataset, vision, "too-urgent", priority="urgent"),
                    headers=bearer(token))
    assert resp.status_code == 403, resp.text
    assert resp.json()["detail"]["field"] == "priority"
    assert _count(api, token, vision) == before
    up = api.post(f"/v1/jobs/{vision_job['job_id']}/tier", json={"tier": "high"}, headers=bearer(token))
    assert up.status_code == 403, up.text
    shown = api.get(f"/v1/jobs/{vision_job['job_id']}", headers=bearer(token)).json()
    assert shown["tier"] == "low"


def test_retier_and_cancel_act_as_the_callers_team(vision_job, tokens, api, yoloq_stack):
    vision, token = tokens["vision"]
    job_id = vision_job["job_id"]
    moved = api.post(f"/v1/jobs/{job_id}/tier", json={"tier": "normal", "reason": "demo"}, headers=bearer(token))
    assert moved.status_code == 200 and moved.json()["new_tier"] == "normal"
    cancelled = api.delete(f"/v1/jobs/{job_id}", headers=bearer(token))
    assert cancelled.status_code == 200 and cancelled.json()["cancelling_runs"]
    wanted = {"yoloq.job.cancelled", "yoloq.job.tier_changed"}
    events = wait_for(lambda: (found := [e for e in job_events(yoloq_stack, job_id) if e["event"] in wanted])
                      and {e["event"] for e in found} == wanted and found, "the audit events", 60)
    assert {e["actor"] for e in events} == {f"{vision}/default"}


def test_a_repeated_idempotency_key_is_409(tokens, api, tiny_dataset):
    audio, token = tokens["audio"]
    headers = {**bearer(token), "Idempotency-Key": uuid.uuid4().hex}
    first = api.post("/v1/jobs", json=job_spec(tiny_dataset, audio, "once"), headers=headers)
    assert first.status_code == 201, first.text
    job_id = first.json()["job_id"]
    try:
        again = api.post("/v1/jobs", json=job_spec(tiny_dataset, audio, "once"), headers=headers)
        assert again.status_code == 409, again.text
        assert job_id in again.json()["detail"]["problem"]
        assert [j["job_id"] for j in api.get("/v1/jobs", params={"team": audio},
                                              headers=bearer(token)).json()] == [job_id]
    finally:
        api.delete(f"/v1/jobs/{job_id}", headers=bearer(token))


@pytest.mark.parametrize("bad", [{"imgsz": 100}, {"epochs": 0}, {"tier": "high"}, {"batch": "x"}],
                         ids=["imgsz", "epochs", "alias", "type"])
def test_422_says_what_the_cli_says(tokens, api, tiny_dataset, tmp_path, capsys, bad):
    audio, token = tokens["audio"]
    spec = job_spec(tiny_dataset, audio, "bad", **bad)
    resp = api.post("/v1/jobs", json=spec, headers=bearer(token))
    assert resp.status_code == 422, resp.text
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["submit", "--dry-run", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {resp.json()['detail']['message']}"


def test_queue_usage_policy_and_teams(tokens, api):
    vision, token = tokens["vision"]
    assert isinstance(api.get("/v1/queue", headers=bearer(token)).json(), list)
    usage = api.get("/v1/usage", params={"since": "24h"}, headers=bearer(token))
    assert usage.status_code == 200 and {"rows", "totals"} <= set(usage.json())
    assert api.get("/v1/usage", params={"since": "soon"}, headers=bearer(token)).status_code == 422
    policy = api.get("/v1/policy", headers=bearer(token)).json()
    assert policy["tiers"] == ["urgent", "high", "normal", "low"]
    assert policy["tier_caps"][vision] == "normal" and policy["team_weights"][vision] == 2.0
    assert api.get("/v1/teams", headers=bearer(token)).status_code == 403  # a team token is no admin
    teams = {t["team"]: t for t in api.get("/v1/teams", headers=bearer(tokens["admin"])).json()}
    assert teams[vision]["cap"] == "normal" and teams[vision]["owner"] == f"{vision}@example.org"
    assert "token_hash" not in teams[vision]
    quota = api.put(f"/v1/teams/{vision}/quota", json={"tu": 1.5}, headers=bearer(tokens["admin"]))
    assert quota.status_code == 200, quota.text
    assert api.get("/v1/policy", headers=bearer(token)).json()["quotas"][vision]["tu"] == 1.5


def test_an_unknown_job_page_is_an_html_404_with_a_way_back(tokens, api):
    """The web page answers a browser in HTML; the REST route for the same job stays JSON."""
    _, token = tokens["audio"]
    with httpx.Client(base_url=str(api.base_url), timeout=120) as browser:
        assert browser.post("/login", data={"token": token}).status_code == 303
        page = browser.get("/jobs/no-such-job", headers={"Accept": "text/html"})
        nowhere = browser.get("/no-such-page", headers={"Accept": "text/html"})
    for resp, needle in ((page, "no-such-job"), (nowhere, "/no-such-page")):
        assert resp.status_code == 404 and resp.headers["content-type"].startswith("text/html"), resp.text
        assert needle in resp.text and '<a id="back" href="/">' in resp.text
    shown = api.get("/v1/jobs/no-such-job", headers=bearer(token))
    assert shown.status_code == 404
    assert set(shown.json()["detail"]) == {"field", "problem", "fix", "message"}
    assert shown.json()["detail"]["field"] == "job"


def test_a_malformed_body_on_a_real_route_is_one_422_and_without_a_token_401(tokens, api):
    _, token = tokens["audio"]
    bad = b'{"name": "x", "epochs": '
    with_token = api.post("/v1/jobs", content=bad, headers={**bearer(token), "Content-Type": "application/json"})
    assert with_token.status_code == 422 and with_token.json()["detail"]["field"] == "body"
    without = api.post("/v1/jobs", content=bad, headers={"Content-Type": "application/json"})
    assert without.status_code == 401 and without.json()["detail"]["field"] == "token"

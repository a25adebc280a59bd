"""The server's Scheduled-runs route (`yoloq.ops.scheduled_runs`) against Prefect's own bulk
route, on the session stack's real server: the same requests give runs with the same columns,
the same first state and the same `prefect.flow-run.Scheduled` event; idempotency keys hold;
a request it cannot reproduce creates nothing. The comparison runs again on PostgreSQL (the
cluster profile's database).

The runs belong to a deployment of a pool no worker polls, so nothing runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from stack_helpers import wait_for

from yoloq.base.names import SCHEDULED_RUNS_ROUTE

pytestmark = pytest.mark.service

STOCK_ROUTE = "/deployments/{id}/create_flow_run/bulk"
VOLATILE = {"id", "name", "idempotency_key", "created", "updated", "state_id", "state", "estimated_start_time_delta",
            "expected_start_time", "next_scheduled_start_time", "estimated_run_time"}


@contextmanager
def unpolled_deployment(client) -> Iterator:
    """A deployment of a process pool (Prefect's real template) that no worker polls; removed after."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    pool = f"unpolled-{uuid.uuid4().hex[:6]}"
    client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                          base_job_template=ProcessWorker.get_default_base_job_template()))
    flow_id = client.create_flow_from_name("scheduled-runs-check")
    deployment_id = client.create_deployment(
        flow_id=flow_id, name="check", work_pool_name=pool, entrypoint="flows/job.py:yolo_job",
        parameters={"default": 1}, tags=["deployment-tag"], job_variables={"env": {"A": "1"}},
        enforce_parameter_schema=False)
    try:
        yield deployment_id
    finally:
        client.delete_deployment(deployment_id)
        client.delete_work_pool(pool)


@pytest.fixture(scope="module")
def deployment(yoloq_stack):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        with unpolled_deployment(client) as deployment_id:
            yield client, deployment_id


def requests(prefix: str, count: int, **extra) -> list[dict]:
    return [{"name": f"{prefix}{i}", "parameters": {"spec": {"epochs": i, "nested": [1, {"a": None}]}},
             "tags": ["job:x", f"n{i}"], "labels": {"yoloq.tier": "urgent"} if i == 0 else {},
             "idempotency_key": f"{prefix}{i}", "enforce_parameter_schema": False, **extra}
            for i in range(count)]


def create(client, route: str, deployment_id, body: list[dict]):
    response = client.request("POST", route, path_params={"id": deployment_id}, json=body)
    return [r["flow_run_id"] for r in response.json()["results"] if r["status"] == "CREATED"]


def comparable(run) -> dict:
    return {k: v for k, v in run.model_dump().items() if k not in VOLATILE}


def scheduled_events(client, run_ids: list[str]) -> dict[str, dict]:
    body = {"filter": {"event": {"name": ["prefect.flow-run.Scheduled"]},
                       "resource": {"id": [f"prefect.flow-run.{i}" for i in run_ids]}}, "limit": 50}
    events = client.request("POST", "/events/filter", json=body).json()["events"]
    return {e["resource"]["prefect.resource.id"].rsplit(".", 1)[-1]: e for e in events}


def event_shape(event: dict) -> dict:
    resource = {k: v for k, v in event["resource"].items()
                if k not in ("prefect.resource.id", "prefect.resource.name", "prefect.state-timestamp")}
    related = sorted((r["prefect.resource.role"], r["prefect.resource.id"]) for r in event["related"])
    payload = {k: v for k, v in event["payload"].items() if k != "validated_state"}
    state = {k: v for k, v in event["payload"]["validated_state"].items() if k not in ("timestamp", "id")}
    return {"event": event["event"], "resource": resource, "related": related, "payload": payload, "state": state}


def test_its_runs_equal_prefects_own_column_for_column(deployment):
    assert_routes_agree(*deployment)


def assert_routes_agree(client, deployment_id) -> None:
    """Three runs through each route from the same requests: equal but for ids, names and times."""
    prefix = uuid.uuid4().hex[:6]
    stock_ids = create(client, STOCK_ROUTE, deployment_id, requests(f"s{prefix}-", 3))
    ours_ids = create(client, SCHEDULED_RUNS_ROUTE, deployment_id, requests(f"o{prefix}-", 3))
    assert len(stock_ids) == len(ours_ids) == 3
    for stock_id, ours_id in zip(stock_ids, ours_ids):
        stock, ours = client.read_flow_run(stock_id), client.read_flow_run(ours_id)
        assert comparable(ours) == comparable(stock)
        assert ours.name.startswith(f"o{prefix}-") and ours.idempotency_key == ours.name
        assert ours.state.type == stock.state.type and ours.state.name == stock.state.name == "Scheduled"
        assert ours.state_id == ours.state.id
        assert ours.expected_start_time == ours.next_scheduled_start_time == ours.state.state_details.scheduled_time
        assert ours.state.state_details.flow_run_id == ours.id
        states = client.read_flow_run_states(ours_id)
        assert [s.id for s in states] == [ours.state.id]
    assert client.read_flow_run(ours_ids[0]).labels["yoloq.tier"] == "urgent"
    assert client.read_flow_run(ours_ids[1]).labels["prefect.deployment.id"] == str(deployment_id)

    def both_events():
        found = scheduled_events(client, [str(i) for i in stock_ids + ours_ids])
        return found if len(found) == 6 else None

    found = wait_for(both_events, "the six runs' Scheduled events", 60)
    for stock_id, ours_id in zip(stock_ids, ours_ids):
        assert event_shape(found[str(ours_id)]) == event_shape(found[str(stock_id)])
        assert found[str(ours_id)]["id"] == str(client.read_flow_run(ours_id).state.id)


def test_an_idempotency_key_returns_the_run_it_made(deployment):
    client, deployment_id = deployment
    prefix = f"i{uuid.uuid4().hex[:6]}-"
    first = create(client, SCHEDULED_RUNS_ROUTE, deployment_id, requests(prefix, 2))
    again = create(client, SCHEDULED_RUNS_ROUTE, deployment_id, requests(prefix, 3))
    assert again[:2] == first and again[2] not in first
    assert len(runs_named(client, prefix)) == 3


def test_a_run_it_cannot_reproduce_refuses_the_whole_request(deployment, yoloq_stack):
    import httpx

    client, deployment_id = deployment
    post = httpx.Client(base_url=yoloq_stack.api_url, timeout=60).post
    prefix = f"r{uuid.uuid4().hex[:6]}-"
    body = requests(prefix, 3)
    body[2]["state"] = {"type": "PENDING"}
    response = post(SCHEDULED_RUNS_ROUTE.format(id=deployment_id), json=body)
    assert response.status_code == 422 and "flow_runs[2]: state" in response.text
    body[2].pop("state")
    body[1]["job_variables"] = {"stream_output": {"not": "a boolean"}}
    response = post(SCHEDULED_RUNS_ROUTE.format(id=deployment_id), json=body)
    assert response.status_code == 422 and "flow_runs[1]" in response.text
    assert runs_named(client, prefix) == []
    missing = post(SCHEDULED_RUNS_ROUTE.format(id=uuid.uuid4()), json=body[:1])
    assert missing.status_code == 404


def runs_named(client, prefix: str) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=prefix)))
    return [r for r in runs if r.name.startswith(prefix)]


@pytest.mark.integration
def test_on_postgresql_its_runs_equal_prefects_own(tmp_path):
    """The same comparison on the cluster profile's database: a server on a fresh PostgreSQL database."""
    from cluster_helpers import cluster_services, fresh_database
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from yoloq.base.paths import state_paths
    from yoloq.ops.stack import Stack, api_answers, free_port, stack_env

    url = fresh_database(cluster_services()["PREFECT_API_DATABASE_CONNECTION_URL"],
                         f"prefect_routes_{uuid.uuid4().hex[:8]}")
    stack = Stack(state_paths(tmp_path / "home"), free_port())
    stack.paths.ensure()
    saved = dict(os.environ)
    try:
        env = {**stack_env(stack), "PREFECT_API_DATABASE_CONNECTION_URL": url}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    server = subprocess.Popen([sys.executable, "-m", "yoloq.ops.server", "--port", str(stack.port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: api_answers(stack.api_url), "the server on PostgreSQL", timeout_s=300)
        with temporary_settings(updates={PREFECT_API_URL: stack.api_url}), get_client(sync_client=True) as client:
            with unpolled_deployment(client) as deployment_id:
                assert_routes_agree(client, deployment_id)
                assert flow_runs_in(url) == 6, "the runs are in the PostgreSQL database"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def flow_runs_in(url: str) -> int:
    import asyncio

    import asyncpg

    async def count() -> int:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return await conn.fetchval("SELECT count(*) FROM flow_run")
        finally:
            await conn.close()

    return asyncio.run(count())

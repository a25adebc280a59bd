"""A route of yoloq's Prefect server: many Scheduled runs of one deployment in one transaction.

Prefect's bulk route (`POST /deployments/{id}/create_flow_run/bulk`) creates its runs one at
a time: per run it reads the deployment's labels, inserts the run, reads it back for the
idempotency key, then orchestrates its first state (reads the run again, locked, runs a dozen
rules, writes the state, reads the flow, deployment and work queue for the state's event).
That is about 20-30 ms per run on a small host, and it is what bounded yoloq's bulk submit
(`bench/scale.py`). Every yoloq job starts the same way: a deployment run, Scheduled now,
in the deployment's work queue, no parent task. This route gives such runs exactly what
Prefect's route gives them (the same columns, the same first state, the same
`prefect.flow-run.Scheduled` event; `tests/test_server_scheduled_runs.py` compares the two on a
real server) with one read of what the runs share and batched writes.

It accepts only what it reproduces: a run that asks for another state, another work queue, a
parent task, or parameter-schema enforcement is refused (422), and so is the whole request:
nothing is created. An idempotency key already used returns the run it created before, as
Prefect's route does.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa
from fastapi import Body, Depends, HTTPException, Path, status
from prefect.server import models, schemas
from prefect.server.api import dependencies
from prefect.server.api import deployments as deployment_routes
from prefect.server.database import PrefectDBInterface, provide_database_interface
from prefect.server.events.clients import PrefectServerEventsClient
from prefect.server.models import events as run_events
from prefect.server.schemas.actions import DeploymentFlowRunCreate
from prefect.server.schemas.responses import FlowRunBulkCreateResponse, FlowRunCreateResult
from prefect.server.utilities.server import PrefectRouter
from prefect.types._datetime import now
from prefect.utilities.schema_tools.hydration import HydrationContext, HydrationError, hydrate

from yoloq.base.names import SCHEDULED_RUNS_ROUTE

LIMIT = 1000  # runs per request
UNSUPPORTED = ("state", "parent_task_run_id", "infrastructure_document_id")

router = PrefectRouter(tags=["yoloq"])


@router.post(SCHEDULED_RUNS_ROUTE, status_code=status.HTTP_201_CREATED)
async def create_scheduled_runs(
    flow_runs: list[DeploymentFlowRunCreate] = Body(..., description="the runs to create"),
    deployment_id: UUID = Path(..., description="the deployment", alias="id"),
    created_by: schemas.core.CreatedBy | None = Depends(dependencies.get_created_by),
    db: PrefectDBInterface = Depends(provide_database_interface),
) -> FlowRunBulkCreateResponse:
    """Create `flow_runs` of the deployment, all Scheduled now, or none of them."""
    if len(flow_runs) > LIMIT:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"more than {LIMIT} runs in one request")
    async with db.session_context(begin_transaction=True) as session:
        deployment = await models.deployments.read_deployment(session=session, deployment_id=deployment_id)
        if deployment is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Deployment not found")
        for index, request in enumerate(flow_runs):
            _refuse_unsupported(index, request, deployment)
            try:  # remembered per distinct variables by `yoloq.ops.server`
                await deployment_routes.validate_job_variables_for_deployment_flow_run(
                    session, deployment, request)
            except HTTPException as exc:
                raise HTTPException(exc.status_code, f"flow_runs[{index}]: {exc.detail}") from None
        existing = await _runs_by_key(db, session, deployment.flow_id,
                                      {r.idempotency_key for r in flow_runs if r.idempotency_key})
        labels = await models.deployments.with_system_labels_for_deployment_flow_run(
            session=session, deployment=deployment)
        try:
            hydration = await HydrationContext.build(session=session, raise_on_error=True, render_jinja=True,
                                                     render_workspace_variables=True)
        except HydrationError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"Error building hydration context: {exc}") from None
        ids, created = [], []
        for request in flow_runs:
            key = request.idempotency_key
            if key is not None and key in existing:
                ids.append(existing[key])
                continue
            run = _flow_run(request, deployment, labels, created_by, hydration)
            created.append(run)
            ids.append(run.id)
            if key is not None:
                existing[key] = run.id
        states = await _insert(db, session, created)
        flow = await models.flows.read_flow(session=session, flow_id=deployment.flow_id)
        events = [await _scheduled_event(session, run, state, flow, deployment) for run, state in zip(created, states)]
    async with PrefectServerEventsClient() as client:  # after the commit: a reader finds the run
        for event in events:
            await client.emit(event)
    return FlowRunBulkCreateResponse(results=[FlowRunCreateResult(flow_run_id=i, status="CREATED") for i in ids])


def _refuse_unsupported(index: int, request: DeploymentFlowRunCreate, deployment: Any) -> None:
    """422 for what Prefect's route would orchestrate differently than this one does."""
    asked = [name for name in UNSUPPORTED if getattr(request, name) is not None]
    if request.work_queue_name not in (None, deployment.work_queue_name):
        asked.append("work_queue_name")
    if request.enforce_parameter_schema or (request.enforce_parameter_schema is None
                                            and deployment.enforce_parameter_schema):
        asked.append("enforce_parameter_schema")
    if asked:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"flow_runs[{index}]: {', '.join(asked)} not supported here; use "
                            "Prefect's /deployments/{id}/create_flow_run/bulk for such runs")


async def _runs_by_key(db: PrefectDBInterface, session: Any, flow_id: UUID, keys: set[str]) -> dict[str, UUID]:
    """The runs of the flow that already hold one of `keys`, by key."""
    if not keys:
        return {}
    found = await session.execute(sa.select(db.FlowRun.idempotency_key, db.FlowRun.id).where(
        db.FlowRun.flow_id == flow_id, db.FlowRun.idempotency_key.in_(keys)))
    return {key: run_id for key, run_id in found.all()}


def _flow_run(request: DeploymentFlowRunCreate, deployment: Any, labels: dict[str, Any],
              created_by: Any, hydration: HydrationContext) -> schemas.core.FlowRun:
    """The run as Prefect's bulk route builds it, with its first state, Scheduled now."""
    parameters = hydrate({**deployment.parameters, **(request.parameters or {})}, hydration)
    run = schemas.core.FlowRun(
        **request.model_dump(exclude={"parameters", "tags", "infrastructure_document_id", "work_queue_name",
                                      "enforce_parameter_schema", "labels", "state"}),
        flow_id=deployment.flow_id, deployment_id=deployment.id, deployment_version=deployment.version,
        parameters=parameters, tags=set(deployment.tags).union(request.tags),
        infrastructure_document_id=deployment.infrastructure_document_id,
        work_queue_name=deployment.work_queue_name, work_queue_id=deployment.work_queue_id,
        created_by=created_by, labels={**labels, **(request.labels or {})},
        state=schemas.states.Scheduled())
    run.state.state_details.flow_run_id = run.id
    return run


async def _insert(db: PrefectDBInterface, session: Any, runs: list[schemas.core.FlowRun]) -> list[Any]:
    """Write the runs, then their first states (a state names its run and the run its state:
    two flushes, each one batch). What the rules of a first Scheduled state set on the run
    (`GlobalFlowPolicy`: type, name, timestamp, expected and next scheduled start) is set
    here. Returns the ORM states."""
    created = now("UTC")
    orm_runs, orm_states = [], []
    for run in runs:
        state = run.state
        row = run.model_dump_for_orm(exclude={"created", "state", "estimated_run_time",
                                              "estimated_start_time_delta"}, exclude_unset=True)
        orm_run = db.FlowRun(**row, id=run.id, created=created, state_type=state.type,
                             state_name=state.name, state_timestamp=state.timestamp,
                             expected_start_time=state.state_details.scheduled_time,
                             next_scheduled_start_time=state.state_details.scheduled_time)
        orm_runs.append(orm_run)
    session.add_all(orm_runs)
    await session.flush()
    for run, orm_run in zip(runs, orm_runs):
        payload = run.state.model_dump_for_orm()
        payload.pop("data", None)
        orm_state = db.FlowRunState(flow_run_id=run.id, **payload)
        session.add(orm_state)
        orm_run.set_state(orm_state)
        orm_states.append(orm_state)
    await session.flush()
    return orm_states


async def _scheduled_event(session: Any, run: schemas.core.FlowRun, orm_state: Any, flow: Any,
                           deployment: Any) -> Any:
    """The `prefect.flow-run.Scheduled` event Prefect's orchestration emits for the run; what
    the runs share (flow, deployment and its work queue) is read once, not once per run."""
    state = schemas.states.State.from_orm_without_result(orm_state)
    work_queue = deployment.work_queue
    run_events._flow_run_resource_data_cache[run.id] = run_events._as_resource_data(
        run, flow, deployment, work_queue, work_queue.work_pool if work_queue else None)
    return await run_events.flow_run_state_change_event(
        session=session, occurred=state.timestamp, flow_run=run, initial_state_id=None,
        initial_state=None, validated_state_id=state.id, validated_state=state)


def install() -> None:
    """Serve the route from the Prefect API of this process's server (with Prefect's own
    dependencies: version check and, on the cluster profile, its credentials)."""
    from prefect.server.api import server

    if router not in server.API_ROUTERS:
        server.API_ROUTERS = (*server.API_ROUTERS, router)

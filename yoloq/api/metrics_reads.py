"""The Prefect reads behind `/metrics`: the GPU pool's segment runs and the job runs, whole
or since a time, a page at a time (Prefect answers at most 200 runs to one read)."""

from __future__ import annotations

from typing import Any


def open_pool_runs(client: Any, scheduled: bool = False) -> list[Any]:
    """The GPU pool's segment runs that hold (or are starting on) GPUs; with `scheduled`, the
    waiting ones too (what a scheduler pass reads)."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    states = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]
    states += [StateType.SCHEDULED] if scheduled else []
    return pool_runs(client, FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
        any_=states))))


def pool_runs(client: Any, flow_run_filter: Any) -> list[Any]:
    """The GPU pool's runs `flow_run_filter` matches (every one when it is None)."""
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    from yoloq.base.names import GPU_POOL

    return paged(client, flow_run_filter, work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[GPU_POOL])))


def paged(client: Any, flow_run_filter: Any, page: int = 200, **filters: Any) -> list[Any]:
    """Every run the filters match, a page at a time, oldest first (a run created while
    paging lands on a later page, not in place of one already read)."""
    from prefect.client.schemas.sorting import FlowRunSort

    found: list[Any] = []
    while True:
        batch = client.read_flow_runs(flow_run_filter=flow_run_filter, limit=page, offset=len(found),
                                      sort=FlowRunSort.EXPECTED_START_TIME_ASC, **filters)
        found.extend(batch)
        if len(batch) < page:
            return found


def read_segments(client: Any, field: str, after: Any) -> list[Any]:
    """The GPU pool's segment runs whose `field` is after `after` (all of them when None)."""
    return pool_runs(client, time_filter(field, after))


def read_jobs(client: Any, field: str, after: Any) -> list[Any]:
    """The `yolo-job` runs whose `field` is after `after` (all of them when None)."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    from yoloq.base.names import JOB_DEPLOYMENT

    deployment = DeploymentFilter(name=DeploymentFilterName(any_=[JOB_DEPLOYMENT.split("/")[1]]))
    return paged(client, time_filter(field, after), deployment_filter=deployment)


def time_filter(field: str, after: Any) -> Any:
    """A FlowRunFilter on `field` after `after`, or None (no filter) when `after` is None."""
    from prefect.client.schemas import filters

    if after is None:
        return None
    kinds = {"start_time": ("start_time", filters.FlowRunFilterStartTime),
             "end_time": ("end_time", filters.FlowRunFilterEndTime),
             "expected_start_time": ("expected_start_time", filters.FlowRunFilterExpectedStartTime)}
    name, kind = kinds[field]
    return filters.FlowRunFilter(**{name: kind(after_=after)})

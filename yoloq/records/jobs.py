"""Read jobs and their segments back from Prefect (the system of record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blocks.checkpoint_base import EpochRecord
from yoloq.base.names import JOB_DEPLOYMENT, SEGMENT_DEPLOYMENT
from yoloq.domain.contract import job_tag, preemption_count, progress_epoch

__all__ = ["EpochRecord", "JobRecord", "epoch_trainings", "find_job", "list_jobs",
           "live_segments", "parent_run", "segments_of", "trainings_per_epoch"]

MAX_RUNS_PER_READ = 200  # the most runs Prefect's API returns to one read (more: HTTP 422)


@dataclass
class JobRecord:
    job_id: str
    team: str
    tier: str
    state: str
    epochs: int
    epochs_done: int = 0
    segments: list[Any] = field(default_factory=list)
    flow_run: Any = None
    submitted_tier: str = ""  # the spec's tier; `tier` is the current one (after `yoloq retier`)

    @property
    def preemptions(self) -> int:
        """Segments preempted (`contract.was_preempted`: a victim killed in its grace counts)."""
        return preemption_count(self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "team": self.team, "tier": self.tier, "state": self.state,
                "epochs": self.epochs, "epochs_done": self.epochs_done,
                "segments": len(self.segments), "preemptions": self.preemptions,
                "flow_run_id": str(self.flow_run.id) if self.flow_run else None}


def _runs(client, deployment: str, limit: int = MAX_RUNS_PER_READ, name: str | None = None):
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName,
                                                FlowRunFilter, FlowRunFilterName)
    from prefect.client.schemas.sorting import FlowRunSort

    flt = FlowRunFilter(name=FlowRunFilterName(any_=[name])) if name else None
    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment.split("/")[1]])),
        flow_run_filter=flt, sort=FlowRunSort.START_TIME_DESC, limit=limit)


def newest_segments(client, job_id: str, limit: int = 10) -> list[Any]:
    """The job's last `limit` segment runs, newest first (the one that finalised it is among
    them, however many segments the job had)."""
    from prefect.client.schemas.sorting import FlowRunSort

    return _job_segments(client, job_id, FlowRunSort.EXPECTED_START_TIME_DESC, limit)


def segments_of(client, job_id: str) -> list[Any]:
    """The job's segment runs, oldest first (at most `MAX_RUNS_PER_READ`)."""
    from prefect.client.schemas.sorting import FlowRunSort

    return _job_segments(client, job_id, FlowRunSort.EXPECTED_START_TIME_ASC, MAX_RUNS_PER_READ)


def _job_segments(client, job_id: str, sort: Any, limit: int) -> list[Any]:
    """The runs tagged with the job, less its parent run (one more read for it, up to the
    API's maximum), in `sort` order."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(
        all_=[job_tag(job_id)])), sort=sort, limit=min(limit + 1, MAX_RUNS_PER_READ))
    return [r for r in runs if (r.parameters or {}).get("stop_after_epoch") is not None][:limit]


def list_jobs(client, job_id: str | None = None, limit: int = 100) -> list[JobRecord]:
    """The newest `limit` jobs with their segments: one read for the parents, then their
    segments read together (a read per job cost `limit` scans of the whole run table: 11 s
    for `GET /v1/jobs` beside 100 queued jobs on a 2-core host, bench/scale.py)."""
    records = []
    parents = _runs(client, JOB_DEPLOYMENT, limit, name=job_id)
    by_job = segments_by_job(client, [run.name for run in parents])
    for run in parents:
        spec = (run.parameters or {}).get("spec") or {}
        rid = run.name
        segments = by_job.get(rid, [])
        done = max([progress_epoch(s) for s in segments] or [0])
        submitted = spec.get("priority", "normal")
        records.append(JobRecord(job_id=rid, team=spec.get("team", "?"),
                                 tier=current_tier(run) or submitted, submitted_tier=submitted,
                                 state=run.state.name if run.state else "?",
                                 epochs=current_epochs(run) or int(spec.get("epochs", 0)),
                                 epochs_done=done,
                                 segments=segments, flow_run=run))
    return records


def segments_by_job(client, job_ids: list[str]) -> dict[str, list[Any]]:
    """The segment runs of each of `job_ids`, oldest first, read `MAX_RUNS_PER_READ` at a time."""
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName,
                                                FlowRunFilter, FlowRunFilterTags)
    from prefect.client.schemas.sorting import FlowRunSort

    found: dict[str, list[Any]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return found
    tags = {job_tag(job_id): job_id for job_id in job_ids}
    flt = FlowRunFilter(tags=FlowRunFilterTags(any_=list(tags)))
    deployments = DeploymentFilter(name=DeploymentFilterName(any_=[SEGMENT_DEPLOYMENT.split("/")[1]]))
    offset = 0
    while True:
        page = client.read_flow_runs(flow_run_filter=flt, deployment_filter=deployments,
                                     sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                                     limit=MAX_RUNS_PER_READ, offset=offset)
        offset += len(page)
        for run in page:
            if (run.parameters or {}).get("stop_after_epoch") is None:
                continue
            for tag in run.tags or ():
                if tag in tags:
                    found[tags[tag]].append(run)
        if len(page) < MAX_RUNS_PER_READ:
            return found


def current_epochs(parent: Any) -> int | None:
    """The total `yoloq extend` set on the job's parent run (None: never extended)."""
    from yoloq.domain.contract import EPOCHS_LABEL

    value = (parent.labels or {}).get(EPOCHS_LABEL)
    return int(value) if value else None


def current_tier(parent: Any) -> str | None:
    """The tier `yoloq retier` set on the job's parent run (None: never retiered): the one read
    of a job's current tier, for `status`, the REST API and the web page alike."""
    from yoloq.domain.contract import TIER_LABEL

    return (parent.labels or {}).get(TIER_LABEL) or None


def active_segments(client) -> list[Any]:
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    flt = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[
        StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.CANCELLING])))
    runs = _runs_filtered(client, SEGMENT_DEPLOYMENT, flt)
    return runs


def _runs_filtered(client, deployment: str, flt):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment.split("/")[1]])),
        flow_run_filter=flt, sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=MAX_RUNS_PER_READ)


def find_job(client, job_id: str) -> JobRecord:
    """The job with this id, or a one-line error pointing at `yoloq status`."""
    from yoloq.base.errors import UserError

    jobs = list_jobs(client, job_id)
    if not jobs:
        raise UserError("job", f"no job named {job_id!r}", "list jobs with `yoloq status`")
    return jobs[0]


def parent_run(client, job_id: str) -> Any:
    """The job's `yolo-job` flow run (named after the job id)."""
    runs = _runs(client, JOB_DEPLOYMENT, limit=1, name=job_id)
    if not runs:
        raise LookupError(f"no yolo-job run named {job_id!r}")
    return runs[0]


def live_segments(client, job_id: str, running_only: bool = False) -> list[Any]:
    """The job's segment runs that are not final (Scheduled, Pending, Running, Cancelling,
    Paused), oldest first; only Running ones with `running_only`."""
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType, FlowRunFilterTags)
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    kinds = [StateType.RUNNING] if running_only else [
        StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.CANCELLING,
        StateType.PAUSED]
    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        tags=FlowRunFilterTags(all_=[job_tag(job_id)]),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=kinds))),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=50)
    return [r for r in runs if (r.parameters or {}).get("stop_after_epoch") is not None]


def epoch_trainings(job_id: str, store: Any = None) -> list[EpochRecord]:
    """The job's epoch ledger: one EpochRecord per epoch trained (job, epoch, segment run id,
    node, start, end), oldest first, read from its newest checkpoint metadata in the store
    (default: this process's configured store). An epoch trained twice has two records;
    count them with `trainings_per_epoch`."""
    from blocks import stores

    store = store or stores.checkpoint_store()
    latest = store.latest(job_id)
    return list(latest.trainings) if latest else []


def trainings_per_epoch(records: list[EpochRecord]) -> dict[int, int]:
    """{epoch: how many times it was trained}."""
    counts: dict[int, int] = {}
    for record in records:
        counts[record.epoch] = counts.get(record.epoch, 0) + 1
    return dict(sorted(counts.items()))

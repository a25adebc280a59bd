"""`yolo-job`: the parent flow of one training job. It never holds a GPU.

analyse -> queue -> train (a sequence of `train-segment` runs in the tier's work
queue of the `yolo-gpu` pool) -> evaluate -> export. Progress lives in the
checkpoint store, so a restarted parent (after `yoloq down`/`up`, or on another
host) continues where the job stands instead of starting over.
"""

from __future__ import annotations

from typing import Any

from yoloq import offline

offline.apply()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402
from prefect.runtime import flow_run as current_run  # noqa: E402
from prefect.states import Cancelled, Failed  # noqa: E402

from yoloq import settings  # noqa: E402
from yoloq.spec import JobSpec, parse_spec  # noqa: E402

MAX_CRASHES = 3


@task(name="analyse")
def analyse_task(spec: dict[str, Any]) -> dict[str, Any]:
    from yoloq.analysis import analyse

    return analyse(parse_spec(spec)).to_dict()


def plan_segment_epochs(job: JobSpec, analysis: dict[str, Any]) -> int:
    """Epochs per segment: the spec's, else enough to fill the target segment time."""
    if job.segment_epochs:
        return job.segment_epochs
    from yoloq.segments import segment_epochs_for

    return segment_epochs_for(job.epochs, float(analysis.get("est_epoch_s") or 0))


@flow(name="yolo-job", log_prints=True)
def yolo_job(spec: dict[str, Any], job_id: str | None = None) -> dict[str, Any]:
    """Run one YOLO training job through the queue to exported models."""
    logger = get_run_logger()
    job = parse_spec(spec)
    job_id = job_id or str(current_run.get_name())
    analysis = analyse_task(job.model_dump())
    per_segment = plan_segment_epochs(job, analysis)
    open_mlflow_run(job, job_id, analysis, per_segment)
    logger.info("job %s: %s, %d epochs in segments of %d, queue %s", job_id,
                analysis.get("job_class"), job.epochs, per_segment, job.tier.queue)
    outcome = _train(job, job_id, analysis, per_segment, logger)
    if outcome is not None:
        return outcome
    return {"job_id": job_id, "epochs": job.epochs, "status": "finished"}


def _train(job: JobSpec, job_id: str, analysis: dict[str, Any], per_segment: int, logger):
    """Queue segments until the schedule is done; return a final state to stop early."""
    store = settings.checkpoint_store()
    crashes = 0
    segment = 0
    while True:
        latest = store.latest(job_id)
        done = latest.epoch if latest else 0
        if done >= job.epochs and _finalised(job_id):
            return None
        target = min(job.epochs, done + per_segment) if done < job.epochs else job.epochs
        segment += 1
        job = _current_tier(job)
        run = run_deployment(
            settings.SEGMENT_DEPLOYMENT,
            parameters={"job_id": job_id, "spec": job.model_dump(), "stop_after_epoch": target,
                        "plan": _plan(job, analysis, done)},
            work_queue_name=job.tier.queue,
            tags=[f"job:{job_id}", f"team:{job.team}", f"tier:{job.priority}", "yoloq"],
            flow_run_name=f"{job_id}.s{segment}.e{done}-{target}",
            timeout=None, poll_interval=1,
        )
        state = run.state
        logger.info("segment %s ended %s (%s)", run.name, state.name, state.message or "")
        if state.is_completed():
            if target >= job.epochs:
                return None
            continue
        if state.name == "Preempted" or _killed_victim(run):
            continue  # queued again at its own tier; resumes from its checkpoint
        if state.is_crashed() and crashes < MAX_CRASHES:
            crashes += 1
            logger.warning("segment crashed (%d/%d); resuming from the last checkpoint",
                           crashes, MAX_CRASHES)
            continue
        if state.is_cancelled():
            return Cancelled(message=f"job cancelled during segment {run.name}")
        return Failed(message=f"segment {run.name} ended {state.name}: {state.message}")


@task(name="open-mlflow-run")
def open_mlflow_run(job: JobSpec, job_id: str, analysis: dict[str, Any],
                    per_segment: int) -> str:
    """Create (or find) the job's one MLflow run at queue time, with its params: the spec,
    the full train arguments and the analysis. Every segment continues this run."""
    from yoloq.tracking import JobTracker

    uri, experiment = settings.mlflow_tracking_uri()
    spec = job.model_dump()
    train_args = spec.pop("train_args")
    params = {"spec": {**spec, "segment_epochs": per_segment}, "train": train_args,
              "analysis": {k: v for k, v in analysis.items() if k not in ("names", "fingerprint")}}
    tracker = JobTracker(uri, experiment)
    if tracker.is_finished(job_id):  # a restarted parent of a finished job: leave it closed
        return ""
    return tracker.run_for_job(
        job_id, params=params, tags={"yoloq.team": job.team, "yoloq.tier": job.priority,
                                     "yoloq.job_class": str(analysis.get("job_class", ""))})


def _current_tier(job: JobSpec) -> JobSpec:
    """Apply a tier change made with `yoloq retier` (a label on this parent run)."""
    from prefect.client.orchestration import get_client

    from work_pools.segments import TIER_LABEL

    with get_client(sync_client=True) as client:
        labels = client.read_flow_run(current_run.get_id()).labels or {}
    tier = labels.get(TIER_LABEL)
    return job.model_copy(update={"priority": tier}) if tier and tier != job.priority else job


def _killed_victim(run) -> bool:
    """A preemption victim killed after its grace time ends Crashed, not Preempted."""
    return bool(run.state.is_crashed() and (run.labels or {}).get(settings.PREEMPT_LABEL) == "requested")


def _finalised(job_id: str) -> bool:
    """True once the final segment has evaluated and exported (the MLflow run is ended)."""
    from yoloq.tracking import JobTracker

    uri, experiment = settings.mlflow_tracking_uri()
    return JobTracker(uri, experiment).is_finished(job_id)


def _plan(job: JobSpec, analysis: dict[str, Any], epochs_done: int) -> dict[str, Any]:
    """What the GPU worker needs to schedule the segment without reading anything else."""
    return {
        "team": job.team, "tier": job.priority, "job_class": analysis.get("job_class", "full"),
        "est_mem_gb": analysis.get("est_gpu_mem_gb", 0.0),
        "est_epoch_s": analysis.get("est_epoch_s", 0.0),
        "epochs": job.epochs, "epochs_done": epochs_done, "submitted_at": _submitted_at(),
    }


def _submitted_at() -> float | None:
    """When the job was submitted (its parent run was created): fair-share order and aging."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    created = ctx.flow_run.created if ctx and ctx.flow_run else None
    return created.timestamp() if created else None

"""`yolo-job`: the parent flow of one training job. It never holds a GPU.

analyse -> queue -> train (a sequence of `train-segment` runs in the tier's work
queue of the `yolo-gpu` pool) -> evaluate -> export. Progress lives in the
checkpoint store, so a restarted parent (after `yoloq down`/`up`, or on another
host) continues where the job stands instead of starting over.
"""

from __future__ import annotations

import time
from typing import Any

from yoloq.base import offline

offline.apply()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402
from prefect.runtime import flow_run as current_run  # noqa: E402
from prefect.states import Cancelled, Failed  # noqa: E402

from yoloq.base.prefect_tls import share_client_tls_context  # noqa: E402

share_client_tls_context()

from flows.recovery import backoff_s, max_retries  # noqa: E402

from yoloq.base.retry import patiently  # noqa: E402
from work_pools.announce import ANNOUNCED_TIERS  # noqa: E402
from work_pools.segments import segment_plan  # noqa: E402
from blocks import stores  # noqa: E402
from yoloq.base.names import SEGMENT_DEPLOYMENT, node_name  # noqa: E402
from yoloq.domain.contract import (FINALISED_LABEL, PARENT_TOKEN_LABEL, PREEMPTED,  # noqa: E402
                                   PREEMPTED_BY_LABEL, THROTTLE_GPU_LABEL, THROTTLE_LABEL,
                                   SegmentPlan, as_plan, plan_of, run_tags, was_preempted)
from yoloq.domain.spec import JobSpec, parse_spec  # noqa: E402


@task(name="analyse")
def analyse_task(spec: dict[str, Any]) -> dict[str, Any]:
    from blocks.job_weights import resolve_model
    from yoloq.analysis import analyse
    from yoloq.datasets.validate import validate_dataset

    return analyse(resolve_model(parse_spec(spec)), validate=validate_dataset).to_dict()


def plan_segment_epochs(job: JobSpec, analysis: dict[str, Any]) -> int:
    """Epochs per segment: the spec's, else enough to fill the target segment time."""
    if job.segment_epochs:
        return job.segment_epochs
    from yoloq.domain.segments import segment_epochs_for

    return segment_epochs_for(job.epochs, float(analysis.get("est_epoch_s") or 0))


@flow(name="yolo-job", log_prints=True)
def yolo_job(spec: dict[str, Any], job_id: str | None = None) -> dict[str, Any]:
    """Run one YOLO training job through the queue to exported models."""
    logger = get_run_logger()
    job = parse_spec(spec)
    job_id = job_id or str(current_run.get_name())
    analysis = analyse_task(job.model_dump())
    per_segment = plan_segment_epochs(job, analysis)
    logger.info("job %s: %s, %d epochs in segments of %d, queue %s", job_id,
                analysis.get("job_class"), job.epochs, per_segment, job.tier.queue)
    outcome = _train(job, job_id, analysis, per_segment, logger)
    if outcome is not None:
        return outcome
    return {"job_id": job_id, "epochs": job.epochs, "status": "finished"}


def _train(job: JobSpec, job_id: str, analysis: dict[str, Any], per_segment: int, logger):
    """Queue segments until the job is trained and finalised; return a final state to stop early.

    Progress is read from the checkpoint store each time round, so whatever happened (a
    crash mid-epoch, during evaluate/export, a restarted parent) the next segment starts
    from the state that exists: a finished checkpoint only needs finalising. Segments that
    crash are queued again after a backoff; the count resets whenever the job progresses."""
    store = patiently(stores.checkpoint_store, "loading the checkpoint store", logger)
    guard = ParentGuard(job_id, logger)
    announced = job.tier in ANNOUNCED_TIERS  # as submitted: the tags the scheduler reads
    failures, progress, last, throttle = 0, None, None, None
    while True:
        if guard.check():
            return Cancelled(message="job cancelled")
        job = _current_changes(job, logger)  # `yoloq retier` and `yoloq extend`
        latest = patiently(lambda: store.latest(job_id), "reading the job's checkpoints", logger)
        done = latest.epoch if latest else 0
        finished = bool(latest and (latest.done_for(job.epochs) or latest.epoch >= job.epochs))
        if finished and patiently(lambda: _finalised(job_id, done), "reading the job's segments",
                                  logger):
            return None
        if (done, finished) != progress:
            failures, progress = 0, (done, finished)
        elif last is not None and last.state.is_completed():  # completed without progress
            failures += 1
            outcome = _retry_or_fail(last, failures, logger)
            if outcome is not None:
                return outcome
        target = job.epochs if finished else min(job.epochs, done + per_segment)
        plan = segment_plan(job, analysis, done, _submitted_at()).with_changes(**(throttle or {}))
        params = mlflow_params(job, analysis, per_segment) if done == 0 else None
        last = run = _segment_run(job, job_id, done, target, plan, logger, announced, params)
        announced = False  # cleared by the call above
        throttle = throttled_plan(run, plan, analysis.get("weights") or job.model) or throttle
        state = run.state
        logger.info("segment %s ended %s (%s)", run.name, state.name, state.message or "")
        if state.is_completed() or was_preempted(run) or state.name == "Drained":
            continue  # the loop top reads where it got to; a preempted (or drained) job queues again
        if state.is_cancelled():
            return Cancelled(message=f"job cancelled during segment {run.name}")
        if state.is_crashed():
            failures += 1
            outcome = _retry_or_fail(run, failures, logger)
            if outcome is not None:
                return outcome
            continue
        return Failed(message=f"segment {run.name} ended {state.name}: {state.message}")


def throttled_plan(run: Any, plan: SegmentPlan | dict[str, Any], model: str) -> dict[str, Any] | None:
    """Soft preemption: a segment stopped with `yoloq.throttle=<batch>` hands its job's next
    segments that batch, its smaller memory estimate and the GPU it shares with the job it
    made room for (the pool scheduler places it back there). The YOLOv5 engine cannot resume
    at another batch: its job resumes as after a plain preemption."""
    from yoloq.analysis.models import engine_of_model

    labels = run.labels or {}
    batch = labels.get(THROTTLE_LABEL)
    if not batch or run.state is None or run.state.name != PREEMPTED:
        return None
    if engine_of_model(model) == "yolov5":
        return None
    plan = as_plan(plan)
    fixed, per_image = plan.fixed_mem_gb, plan.mem_per_image_gb
    mem = fixed + int(batch) * per_image if per_image else plan.est_mem_gb
    return {"batch": int(batch), "throttle_batch": int(batch), "est_mem_gb": mem,
            "throttle_gpu": labels.get(THROTTLE_GPU_LABEL, ""),
            "throttle_for": labels.get(PREEMPTED_BY_LABEL, "")}


def _retry_or_fail(run: Any, failures: int, logger) -> Any:
    """None after waiting out the backoff (queue the segment again), or the job's Failed state
    once `failures` in a row without progress exceed the bound."""
    state = run.state
    if failures > max_retries():
        return Failed(message=f"segment {run.name} ended {state.name} {failures} times in a row "
                              f"without progress; last: {state.message}")
    wait = backoff_s(failures)
    logger.warning("segment %s ended %s without progress (%d/%d); resuming from the last "
                   "checkpoint in %.0f s", run.name, state.name, failures, max_retries(), wait)
    time.sleep(wait)
    return None


def _segment_run(job: JobSpec, job_id: str, done: int, target: int, plan: SegmentPlan,
                 logger, announced: bool = False, params: dict[str, Any] | None = None) -> Any:
    """Wait for the job's live segment if it has one, else create one and wait for it
    (`announced`: the job was submitted at an announced tier and this parent has not yet
    cleared the announcement, which it does once the job has a segment;
    `params`: the MLflow run's params, for a segment that may be the one to create the run).

    The idempotency key names the job, the epoch it starts from and how many segments
    from that epoch have ended: two parents of one job (however they came about) create
    the same run, never two."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import live_segments, segments_of

    def read() -> tuple[list[Any], list[Any]]:
        with get_client(sync_client=True) as client:
            return live_segments(client, job_id), segments_of(client, job_id)

    live, earlier = patiently(read, "reading the job's segments", logger)
    if live:
        logger.warning("job %s already has segment %s (%s); waiting for it instead of "
                       "queuing another", job_id, live[0].name, live[0].state.name)
        if announced:  # a parent that took over from one that died before clearing it
            _withdraw_announcement(logger)
        return _wait_final(live[0].id, logger)
    name, key = segment_identity(job_id, done, target, earlier)
    run = patiently(lambda: run_deployment(  # a busy server answers 503; the key makes a retry safe
        SEGMENT_DEPLOYMENT,
        parameters={"job_id": job_id, "spec": job.model_dump(), "stop_after_epoch": target,
                    "plan": plan.to_dict(), **({"mlflow_params": params} if params else {})},
        work_queue_name=job.tier.queue,
        tags=run_tags(job_id, job.team, job.priority),
        flow_run_name=name, idempotency_key=key,
        timeout=0,
    ), "queuing the segment", logger)
    if announced:
        _withdraw_announcement(logger)
    return _wait_final(run.id, logger)


def _withdraw_announcement(logger) -> None:
    """The first segment exists: the scheduler now sees it, not the submit's announcement
    of it (`work_pools.announce`)."""
    from prefect.client.orchestration import get_client

    from work_pools.announce import withdrawn

    run_id = current_run.get_id()
    if run_id is None:
        return

    def write() -> None:
        with get_client(sync_client=True) as client:
            client.update_flow_run_labels(run_id, withdrawn())

    patiently(write, "withdrawing the job's announcement", logger)


def segment_identity(job_id: str, done: int, target: int, earlier: list[Any]) -> tuple[str, str]:
    """The next segment's (run name, idempotency key) from the job's segments so far: every
    parent that reads the same segments derives the same key, so Prefect creates one run;
    each segment that ended from the same epoch makes the next try a new key."""
    tries = sum(1 for r in earlier if plan_of(r).epochs_done == done)
    stage = f"finalise-e{done}" if target == done else f"e{done}-{target}"
    return f"{job_id}.s{len(earlier) + 1}.{stage}", f"{job_id}:from-e{done}:try-{tries}"


def _wait_final(flow_run_id: Any, logger) -> Any:
    """Poll the run until it is final; an unreachable API is waited out (bounded)."""
    from prefect.client.orchestration import get_client

    from work_pools.segment_watch import shared_watch

    if (watch := shared_watch()) is not None:  # in the job runner: one poll for every parent
        return watch.wait_final(flow_run_id)

    def read() -> Any:
        with get_client(sync_client=True) as client:
            return client.read_flow_run(flow_run_id)

    while True:
        run = patiently(read, "reading the segment's state", logger)
        if run.state and run.state.is_final():
            return run
        time.sleep(1.0)


class ParentGuard:
    """One live parent per job: each parent process writes its own token into a label of the
    job's flow run; one that finds another token has been replaced and leaves quietly
    (its replacement carries on from the store, adopting any live segment)."""

    LABEL = PARENT_TOKEN_LABEL

    def __init__(self, job_id: str, logger) -> None:
        import os
        import uuid

        self.job_id, self.logger = job_id, logger
        self.token = f"{uuid.uuid4().hex[:12]}@{node_name()}:{os.getpid()}"
        self.run_id = current_run.get_id()
        if self.run_id:
            patiently(self._write, "writing the job's parent token", logger)

    def _write(self) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            client.update_flow_run_labels(self.run_id, {self.LABEL: self.token})

    def check(self) -> bool:
        """True when the job is being cancelled (its segment may have ended otherwise first)."""
        if not self.run_id:
            return False
        from prefect.client.orchestration import get_client

        def read() -> Any:
            with get_client(sync_client=True) as client:
                return client.read_flow_run(self.run_id)

        run = patiently(read, "reading the job's parent token", self.logger)
        current = (run.labels or {}).get(self.LABEL)
        if current != self.token:
            from prefect.exceptions import Abort

            self.logger.warning("job %s: another parent (%s) took over; this one (%s) "
                                "stops without touching the job", self.job_id, current, self.token)
            raise Abort(f"job {self.job_id}: another parent took over")  # the engine sets no state
        return bool(run.state and run.state.is_cancelling())


def mlflow_params(job: JobSpec, analysis: dict[str, Any], per_segment: int) -> dict[str, Any]:
    """The job's MLflow run params: the spec, the full train arguments and the analysis. The
    segment that creates the run logs them (the parent never imports MLflow: 150-200 MB of
    the job runner's memory, and 0.1-0.3 s of every job's way to its first segment)."""
    spec = job.model_dump()
    train_args = spec.pop("train_args")
    return {"spec": {**spec, "segment_epochs": per_segment}, "train": train_args,
            "analysis": {k: v for k, v in analysis.items() if k not in ("names", "fingerprint")}}


def _current_changes(job: JobSpec, logger) -> JobSpec:
    """The job with the changes made since it was submitted, read from labels on this parent
    run: a tier (`yoloq retier`) and a new total of epochs (`yoloq extend`)."""
    from prefect.client.orchestration import get_client

    from yoloq.domain.contract import EPOCHS_LABEL, TIER_LABEL

    run_id = current_run.get_id()
    if run_id is None:  # called outside a flow run (a test calling in)
        return job

    def read() -> dict[str, str]:
        with get_client(sync_client=True) as client:
            return client.read_flow_run(run_id).labels or {}

    labels = patiently(read, "reading the job's changes", logger)
    changes: dict[str, Any] = {}
    if labels.get(TIER_LABEL) and labels[TIER_LABEL] != job.priority:
        changes["priority"] = labels[TIER_LABEL]
    if labels.get(EPOCHS_LABEL) and int(labels[EPOCHS_LABEL]) != job.epochs:
        changes["epochs"] = int(labels[EPOCHS_LABEL])
    return job.model_copy(update=changes) if changes else job


def _finalised(job_id: str, epoch: int) -> bool:
    """True once a segment has evaluated, exported and ended the job's MLflow run at `epoch`:
    it says so in a label of its run (`contract.FINALISED_LABEL`), so the parent reads
    Prefect, not MLflow. An earlier finalisation (before `yoloq extend`) does not count."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import newest_segments

    with get_client(sync_client=True) as client:
        marks = {(run.labels or {}).get(FINALISED_LABEL) for run in newest_segments(client, job_id)}
    return str(epoch) in marks


def _submitted_at() -> float | None:
    """When the job was submitted (its parent run was created): fair-share order and aging."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    created = ctx.flow_run.created if ctx and ctx.flow_run else None
    return created.timestamp() if created else None

"""`train-segment`: one resumable slice of a job's training, on one GPU slot.

Restores the job's latest checkpoint, checks it is the one its plan says is done,
trains epochs [k, n) of the full schedule, saves a checkpoint to the store after
every epoch (retried with backoff), records each trained epoch in the job's epoch
ledger, logs each epoch to the job's MLflow run (buffered while MLflow is down),
and asks the preemption context after each checkpoint. A segment asked to stop
ends in a `Cancelled` state named `Preempted`, or `Drained` when `yoloq down` asked
(`work_pools.drain`: not a preemption). The segment that completes the
schedule also runs evaluate and export while it holds the GPU; a segment that
finds the schedule complete but not finalised (a crash during evaluate/export)
only finalises, each step once.

Failures of the surroundings (store, MLflow, disk, an unreadable block) end the
segment `Crashed` with one line, so its parent queues it again after a backoff.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from yoloq.base import offline

offline.apply()

from prefect import flow, get_run_logger  # noqa: E402
from prefect.runtime import flow_run as current_run  # noqa: E402
from prefect.states import Cancelled, Crashed, Failed  # noqa: E402

from yoloq.base.prefect_tls import share_client_tls_context  # noqa: E402

share_client_tls_context()

from flows.epoch_ledger import EpochLedger  # noqa: E402
from flows.preemption import (  # noqa: E402
    FlowRunPreemption,
    InMemoryPreemption,
    publish_progress,
    publish_trained,
)
from yoloq.base.retry import is_transient, one_line  # noqa: E402
from blocks.checkpoint_base import store_retry_limit_s  # noqa: E402
from flows.stages import finalise, mark_finalised  # noqa: E402
from flows.stub_segment import finalise_stub, run_stub_segment  # noqa: E402
from flows.stub_segment import refusal as stub_refusal  # noqa: E402
from work_pools.drain import DRAINED  # noqa: E402
from blocks import stores  # noqa: E402
from yoloq.base.paths import state_paths  # noqa: E402
from yoloq.domain.contract import (PREEMPTED, TAG_JOB_CLASS, TAG_PREEMPTIONS,  # noqa: E402
                                   TAG_EPOCHS, TAG_REDUCED_BATCH, TAG_SEGMENTS, TAG_TEAM, TAG_THROTTLED,
                                   TAG_TIER, PlanError, SegmentPlan, as_plan)
from yoloq.domain.spec import JobSpec  # noqa: E402
from yoloq.settings import settings  # noqa: E402

FORKED_AT_ENV = "YOLOQ_FORKED_AT"  # work_pools.launcher sets it in a warm segment


class SetupTimer:
    """Where a segment's time goes before its first epoch, as one log line: the fixed cost
    per segment that issue 10 measures (`bench/overhead.py`), step by step."""

    def __init__(self) -> None:
        self.last = time.time()
        self.steps: list[tuple[str, float]] = []
        forked_at = settings().forked_at
        if forked_at is not None:  # the engine's start in a warm child: fork -> the flow function
            self.steps.append(("fork -> flow start", max(0.0, self.last - forked_at)))

    def mark(self, step: str) -> None:
        now = time.time()
        self.steps.append((step, now - self.last))
        self.last = now

    def line(self) -> str:
        text = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in self.steps)
        launcher = sys.modules.get("work_pools.launcher")
        if launcher is not None and settings().forked_at is not None:
            late = launcher.imported_after_fork()
            text += f"; {len(late)} module(s) imported after the fork"
            text += f" ({', '.join(late[:8])}{' ...' if len(late) > 8 else ''})" if late else ""
        return text


class _Hooks:
    """Connects the engine's epoch boundaries to the store, the ledger, MLflow and preemption."""

    def __init__(self, job: JobSpec, job_id: str, store: Any, tracker: Any, run_id: str,
                 preemption: Any, ledger: EpochLedger, logger: Any) -> None:
        self.job, self.job_id, self.store, self.tracker = job, job_id, store, tracker
        self.run_id, self.preemption, self.ledger, self.logger = run_id, preemption, ledger, logger
        self.unsent: list[tuple[int, dict[str, float]]] = []  # epochs MLflow has not taken yet
        self.timer: SetupTimer | None = None
        self.epoch_started = time.monotonic()

    def on_epoch_start(self, epoch: int) -> None:
        self.ledger.start(epoch)
        self.epoch_started = time.monotonic()
        if self.timer is not None:  # the first epoch of this segment: its setup is over
            self.timer.mark("trainer setup")
            self.logger.info("segment setup: %s", self.timer.line())
            self.timer = None

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.ledger.end(epoch)
        self.unsent.append((epoch, metrics))
        self.deliver_metrics()
        shown = {k: round(v, 4) for k, v in metrics.items() if "mAP" in k or k.endswith("box_loss")}
        self.logger.info("epoch %d done %s", epoch, shown)
        try:
            publish_trained(epoch, time.monotonic() - self.epoch_started)
        except Exception as exc:  # informative only (a hard stop's report, a drain's bound)
            self.logger.warning("trained-epoch label not updated (%s)", one_line(exc))

    def deliver_metrics(self) -> bool:
        """Log buffered epochs in order; keep them (and training going) while MLflow is down."""
        while self.unsent:
            epoch, metrics = self.unsent[0]
            try:
                self.tracker.log_epoch(self.run_id, epoch, metrics)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.logger.warning("MLflow unreachable (%s); %d epoch(s) buffered",
                                    one_line(exc), len(self.unsent))
                return False
            self.unsent.pop(0)
        return True

    def deliver_patiently(self, limit_s: float) -> bool:
        """At the segment's end: keep trying the buffered epochs (backoff, at most `limit_s`)."""
        deadline, delay = time.monotonic() + limit_s, 1.0
        while not self.deliver_metrics():
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        return True

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        finished = checkpoint_finished(path, epoch, self.job.epochs)
        started = time.monotonic()
        info = self.store.save_retrying(self.job_id, epoch, path, finished=finished,
                                        trainings=self.ledger.records, target_epochs=self.job.epochs)
        self.logger.info("checkpoint epoch %d saved (%s, sha256 %s%s)", epoch, info.key,
                         info.sha256[:12], ", finished" if finished else "")
        try:
            publish_progress(epoch, time.monotonic() - started)
        except Exception as exc:  # informative only: the store holds the progress
            self.logger.warning("progress label not updated (%s)", one_line(exc))

    def should_stop(self, epoch: int) -> bool:
        try:
            return self.preemption.should_preempt(epoch)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.logger.warning("preemption check failed (%s); training on", one_line(exc))
            return False


def tracking_fails_fast() -> None:
    """MLflow's client retries a refused request for minutes by default, which would stall
    training; a segment buffers instead, so it asks for quick failures (unless set)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")


def checkpoint_finished(path: Path, epoch: int, epochs: int) -> bool:
    """A checkpoint is finished when it is not resumable (last epoch or early stopping)."""
    from yoloq.analysis.fingerprint import read_header

    state = read_header(path).get("yoloq")
    if isinstance(state, dict) and "resumable" in state:
        return not state["resumable"]
    return epoch >= epochs


@flow(name="train-segment", log_prints=True, retries=0)
def train_segment(job_id: str, spec: dict[str, Any], stop_after_epoch: int,
                  plan: dict[str, Any] | None = None,
                  mlflow_params: dict[str, Any] | None = None) -> Any:
    """Train the job up to `stop_after_epoch` epochs in total, resuming from its store.
    `mlflow_params` (a job's segments from epoch 0): the params of the job's MLflow run, which
    the first of them creates."""
    timer = SetupTimer()
    logger = get_run_logger()
    job = JobSpec.model_validate(spec)
    try:
        parsed = as_plan(plan)
    except PlanError as exc:  # e.g. a plan written by a newer yoloq: one line, nothing trained
        return Failed(message=str(exc))
    try:
        return _segment(job, job_id, stop_after_epoch, parsed, logger, timer, mlflow_params)
    except StubRefused as exc:  # the bench's stub on a node with real GPUs: nothing trained
        return Failed(message=str(exc))
    except Exception as exc:
        if not is_transient(exc):
            raise
        line = one_line(exc)
        logger.error("segment stopped by a transient failure: %s", line)
        return Crashed(message=f"{line} (transient; the job resumes from its last checkpoint)")


def _segment(job: JobSpec, job_id: str, stop_after_epoch: int, plan: SegmentPlan,
             logger: Any, timer: SetupTimer | None = None,
             mlflow_params: dict[str, Any] | None = None) -> Any:
    from yoloq.records.tracking import JobTracker

    timer = timer or SetupTimer()

    duplicate = _other_live_segment(job_id)
    if duplicate:
        return Crashed(message=f"another segment of job {job_id} is running ({duplicate}); "
                               "not training (a job never has two live segments)")
    timer.mark("duplicate check")
    job = extended_total(job, job_id)
    store = stores.checkpoint_store()
    uri, experiment = stores.mlflow_tracking_uri()
    timer.mark("blocks")
    tracker = JobTracker(uri, experiment)
    newest = store.latest(job_id)
    if tracker.is_finished(job_id) and (newest is None or newest.done_for(job.epochs)):
        # a late duplicate of a finished job (not one extended past it): touch nothing
        logger.warning("job %s is already finished and finalised; nothing to do", job_id)
        mark_finalised(newest.epoch if newest else 0)  # its parent may not have seen it
        return {"job_id": job_id, "finished": True, "already_finalised": True}
    run_id = tracker.run_for_job(job_id, params=mlflow_params, tags={
        TAG_TEAM: job.team, TAG_TIER: job.priority, TAG_EPOCHS: str(job.epochs),
        **({TAG_JOB_CLASS: plan.job_class} if plan.job_class else {})})
    tracker.increment_tag(run_id, TAG_SEGMENTS)
    timer.mark("MLflow run")

    run_key = str(current_run.get_id() or "local")
    workdir = state_paths().scratch / job_id / run_key
    try:
        return _train(job, job_id, stop_after_epoch, plan, workdir, store, tracker, run_id,
                      run_key, logger, timer)
    finally:  # node-local scratch; the store holds the checkpoints, MLflow the artifacts
        shutil.rmtree(workdir, ignore_errors=True)


def _train(job: JobSpec, job_id: str, stop_after_epoch: int, plan: SegmentPlan | dict[str, Any],
           workdir: Path, store: Any, tracker: Any, run_id: str, run_key: str,
           logger: Any, timer: SetupTimer | None = None) -> Any:
    from blocks.job_weights import resolve_model
    from yoloq.datasets import resolve_dataset
    from yoloq.engine import SegmentRequest, run_segment

    timer = timer or SetupTimer()
    plan = as_plan(plan)
    # s3:// data -> this node's verified dataset cache (a DatasetError if it cannot be fetched);
    # `model: job:<id>` -> that job's weights, fetched into this node's state folder
    job = resolve_model(job.model_copy(update={"data": str(resolve_dataset(job.data, logger))}))
    timer.mark("dataset")
    newest = store.latest(job_id)  # newest readable metadata: the ledger so far
    restored = store.restore(job_id, workdir / "restore")
    timer.mark("checkpoint fetch")
    for warning in (restored.warnings if restored else []):
        logger.warning(warning)
    problem = plan_mismatch(plan, restored)
    if problem:
        return Failed(message=problem)
    stub_s = _stub_seconds(logger)
    if restored is not None and restored.info.done_for(job.epochs):
        logger.info("job %s: all epochs trained (checkpoint epoch %d); finalising",
                    job_id, restored.info.epoch)
        done = finalise_stub(tracker, run_id, restored.info.epoch) if stub_s else finalise(
            job, job_id, tracker, run_id, workdir / "final", restored.info.epoch, checkpoint=restored.path)
        return {"job_id": job_id, "finished": True, "epochs_done": restored.info.epoch, **done}
    if restored is not None and restored.info.extended_to(job.epochs):
        logger.info("job %s: extended from %d to %d epochs; training on from its finished "
                    "checkpoint", job_id, restored.info.epoch, job.epochs)
    start = restored.info.epoch if restored else 0
    job = batch_for_segment(job, restored.path if restored else None, tracker, run_id, logger)
    job, rebatch = throttled(job, restored is not None, plan, tracker, run_id, logger)
    device = "bench stub (sleeps)" if stub_s else _device()
    logger.info("job %s: epochs %d -> %d of %d on %s", job_id, start, stop_after_epoch,
                job.epochs, device)

    preemption = _preemption_context()
    ledger = EpochLedger(job_id, run_key, newest.trainings if newest else ())
    hooks = _Hooks(job, job_id, store, tracker, run_id, preemption, ledger, logger)
    timer.mark("batch and plan checks")
    hooks.timer = timer
    if os.environ.get("PREFECT__FLOW_RUN_ID"):  # a segment process (not a test calling in)
        # What exists now (the imports, the engine) lives until the process ends: the
        # collector's permanent generation, so ultralytics' gc.collect() at each epoch end
        # scans only training's own objects (it took about a second on the imported heap).
        gc.freeze()
    if stub_s:
        result: Any = run_stub_segment(job.epochs, job.batch, start, stop_after_epoch,
                                       workdir / "train", hooks, stub_s)
    else:
        result = run_segment(SegmentRequest(
            spec=job, workdir=workdir / "train", stop_after_epoch=stop_after_epoch,
            resume_from=restored.path if restored else None, device=device,
            expect_epochs_done=start, rebatch=rebatch), hooks)
    if not hooks.deliver_patiently(store_retry_limit_s()):
        raise ConnectionError(f"MLflow did not take the metrics of epochs "
                              f"{[e for e, _ in hooks.unsent]}; checkpoints are saved")

    summary: dict[str, Any] = {"job_id": job_id, "start_epoch": start,
                               "epochs_done": result.epochs_done, "finished": result.finished}
    if result.stopped_early and preemption.cancelled:
        return Cancelled(message=f"cancelled at epoch {result.epochs_done} (checkpoint kept)")
    if result.stopped_early and preemption.drained:  # `yoloq down`: not a preemption
        return Cancelled(name=DRAINED, message=f"drained at epoch {result.epochs_done} "
                                               "(stack stopping; checkpoint saved)")
    if result.stopped_early:
        tracker.increment_tag(run_id, TAG_PREEMPTIONS)
        return Cancelled(name=PREEMPTED, message=f"preempted at epoch {result.epochs_done}")
    if result.finished and stub_s:
        summary.update(finalise_stub(tracker, run_id, result.epochs_done))
    elif result.finished:
        summary.update(finalise(job, job_id, tracker, run_id, Path(result.save_dir), result.epochs_done,
                                best=result.best))
    return summary


def _stub_seconds(logger: Any) -> float | None:
    """`YOLOQ_BENCH_STUB_SEGMENT_S` (bench only, `flows.stub_segment`): seconds per epoch of the
    sleeping stub engine, said in the segment's log; refused on a node with real GPUs."""
    seconds = settings().bench_stub_segment_s
    if seconds is None:
        return None
    problem = stub_refusal(settings().declared_gpus)
    if problem:
        raise StubRefused(problem)
    logger.warning("bench stub engine (YOLOQ_BENCH_STUB_SEGMENT_S=%g): this segment sleeps "
                   "instead of training", seconds)
    return seconds


class StubRefused(RuntimeError):
    """The bench's stub engine was asked for on a node with real GPUs."""


def extended_total(job: JobSpec, job_id: str) -> JobSpec:
    """The job with the total `yoloq extend` set on its parent run since this segment was
    queued: a segment trains toward the total in force when it starts (one already running
    keeps its own, finishes, and the next one trains on)."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import current_epochs, parent_run

    if not current_run.get_id():  # called outside a flow run (a test calling in)
        return job
    with get_client(sync_client=True) as client:
        try:
            parent = parent_run(client, job_id)
        except LookupError:  # a segment run on its own (no job parent): its spec is the job
            return job
    total = current_epochs(parent)
    return job.model_copy(update={"epochs": total}) if total and total > job.epochs else job


def plan_mismatch(plan: SegmentPlan | dict[str, Any], restored: Any) -> str | None:
    """Why the restored checkpoint is not the one the plan says is done (None: it is).

    A later epoch is fine (another segment moved on); an earlier one only when every newer
    checkpoint was found unusable (corrupt or truncated, with a warning). Anything else is
    a store that lost or hides the job's progress: train nothing rather than start over."""
    planned = as_plan(plan).epochs_done
    got = restored.info.epoch if restored else 0
    if got >= planned:
        return None
    skipped = restored.skipped if restored else []
    if skipped and max(skipped) >= planned:
        return None
    return (f"plan.epochs_done: the plan says {planned} epoch(s) are done, the checkpoint store "
            f"holds {got if restored else 'no checkpoint'}; not training (check the store "
            "configuration: a job must resume from its own store)")


def batch_for_segment(job: JobSpec, checkpoint: Path | None, tracker: Any, run_id: str,
                      logger: Any) -> JobSpec:
    """The batch this segment trains with. A job keeps the batch it started with: a resumed
    job uses its checkpoint's; a new one uses the worker's reduced batch when it was admitted
    on a smaller GPU (ultralytics rescales accumulation and weight decay for `nbs`). A reduced
    batch trains a different schedule than the spec's, so such a job is no longer exact
    against a run at the spec's batch; it is recorded on the MLflow run."""
    if checkpoint is not None:
        from yoloq.analysis.fingerprint import read_header

        args = read_header(checkpoint).get("train_args") or {}
        batch = int(args.get("batch") or job.batch) if isinstance(args, dict) else job.batch
    else:
        batch = settings().reduced_batch or job.batch
    if batch == job.batch:
        return job
    logger.warning("job %s trains with batch %d instead of %d (reduced to fit its GPU)",
                   job.name, batch, job.batch)
    tracker.set_tags(run_id, {TAG_REDUCED_BATCH: str(batch)})
    return job.model_copy(update={"batch": batch})


def throttled(job: JobSpec, resumed: bool, plan: SegmentPlan, tracker: Any, run_id: str,
              logger: Any) -> tuple[JobSpec, bool]:
    """Soft preemption: the plan's `throttle_batch` replaces the checkpoint's batch at this
    boundary (ultralytics sets accumulate = max(round(nbs / batch), 1), so the effective batch
    stays `nbs`). The change is recorded on the MLflow run. (job, batch changed here)."""
    batch = plan.throttle_batch
    if not resumed or not batch or batch == job.batch:
        return job, False
    from work_pools.policy.rules import accumulate_for

    nbs = int(job.train_args.get("nbs") or 64)
    change = (f"batch {job.batch} -> {batch}, accumulate {accumulate_for(job.batch, nbs)} -> "
              f"{accumulate_for(batch, nbs)} (soft preemption for job {plan.throttle_for})")
    logger.warning("job %s throttled: %s", job.name, change)
    tracker.set_tags(run_id, {TAG_REDUCED_BATCH: str(batch), TAG_THROTTLED: change})
    return job.model_copy(update={"batch": batch}), True


def _other_live_segment(job_id: str) -> str | None:
    """The name of another Running segment of this job that started before this one."""
    me = current_run.get_id()
    if not me or not os.environ.get("PREFECT__FLOW_RUN_ID"):
        return None
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import live_segments

    with get_client(sync_client=True) as client:
        mine = client.read_flow_run(me)
        key = (mine.start_time or mine.created, str(mine.id))
        for run in live_segments(client, job_id, running_only=True):
            if str(run.id) != str(me) and (run.start_time or run.created, str(run.id)) < key:
                return run.name
    return None


def _preemption_context():
    flow_run_id = current_run.get_id()
    if flow_run_id and os.environ.get("PREFECT__FLOW_RUN_ID"):
        from uuid import UUID

        return FlowRunPreemption(UUID(str(flow_run_id)))
    return InMemoryPreemption()


def _device() -> str:
    """The GPU(s) the worker granted, or the CPU where no GPU exists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible and visible != "-1":
        import torch

        if torch.cuda.is_available():
            return "0"  # one GPU per segment: multi-GPU training cannot resume exactly
    return "cpu"

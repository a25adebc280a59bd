"""`train-segment`: one resumable slice of a job's training, on one GPU slot.

Restores the job's latest checkpoint, trains epochs [k, n) of the full schedule,
saves a checkpoint to the store after every epoch, logs each epoch to the job's
MLflow run, and asks the preemption context after each checkpoint. A segment
asked to stop ends in a `Cancelled` state named `Preempted`. The segment that
completes the schedule also runs evaluate and export while it holds the GPU.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoloq import offline

offline.apply()

from prefect import flow, get_run_logger  # noqa: E402
from prefect.runtime import flow_run as current_run  # noqa: E402
from prefect.states import Cancelled  # noqa: E402

from flows.preemption import FlowRunPreemption, InMemoryPreemption, publish_progress  # noqa: E402
from flows.stages import evaluate_task, export_task  # noqa: E402
from yoloq import settings  # noqa: E402
from yoloq.paths import state_paths  # noqa: E402
from yoloq.spec import JobSpec  # noqa: E402

PREEMPTED = "Preempted"


@dataclass
class _Hooks:
    """Connects the engine's epoch boundaries to the store, MLflow and preemption."""

    job_id: str
    store: Any
    tracker: Any
    run_id: str
    preemption: Any
    logger: Any

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.tracker.log_epoch(self.run_id, epoch, metrics)
        shown = {k: round(v, 4) for k, v in metrics.items() if "mAP" in k or k.endswith("box_loss")}
        self.logger.info("epoch %d done %s", epoch, shown)

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        info = self.store.save(self.job_id, epoch, path)
        self.logger.info("checkpoint epoch %d saved (%s, sha256 %s)", epoch, info.key, info.sha256[:12])
        publish_progress(epoch)

    def should_stop(self, epoch: int) -> bool:
        return self.preemption.should_preempt(epoch)


@flow(name="train-segment", log_prints=True, retries=0)
def train_segment(job_id: str, spec: dict[str, Any], stop_after_epoch: int,
                  plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train the job up to `stop_after_epoch` epochs in total, resuming from its store."""
    from yoloq.tracking import JobTracker

    logger = get_run_logger()
    job = JobSpec.model_validate(spec)
    store = settings.checkpoint_store()
    uri, experiment = settings.mlflow_tracking_uri()
    tracker = JobTracker(uri, experiment)
    run_id = tracker.run_for_job(job_id, tags={"yoloq.team": job.team, "yoloq.tier": job.priority})
    tracker.increment_tag(run_id, "yoloq.segments")

    run_key = str(current_run.get_id() or "local")
    workdir = state_paths().scratch / job_id / run_key
    try:
        return _train(job, job_id, stop_after_epoch, workdir, store, tracker, run_id, logger)
    finally:  # node-local scratch; the store holds the checkpoints, MLflow the artifacts
        shutil.rmtree(workdir, ignore_errors=True)


def _train(job: JobSpec, job_id: str, stop_after_epoch: int, workdir: Path, store: Any,
           tracker: Any, run_id: str, logger: Any) -> Any:
    from yoloq.datasets import resolve_dataset
    from yoloq.engine import SegmentRequest, run_segment

    # s3:// data -> this node's verified dataset cache (a DatasetError if it cannot be fetched)
    job = job.model_copy(update={"data": str(resolve_dataset(job.data, logger))})
    restored = store.restore(job_id, workdir / "restore")
    for warning in (restored.warnings if restored else []):
        logger.warning(warning)
    start = restored.info.epoch if restored else 0
    job = batch_for_segment(job, restored.path if restored else None, tracker, run_id, logger)
    logger.info("job %s: epochs %d -> %d of %d on %s", job_id, start, stop_after_epoch,
                job.epochs, _device())

    preemption = _preemption_context()
    hooks = _Hooks(job_id, store, tracker, run_id, preemption, logger)
    result = run_segment(SegmentRequest(
        spec=job, workdir=workdir / "train", stop_after_epoch=stop_after_epoch,
        resume_from=restored.path if restored else None, device=_device()), hooks)

    summary: dict[str, Any] = {"job_id": job_id, "start_epoch": start,
                               "epochs_done": result.epochs_done, "finished": result.finished}
    if result.stopped_early and preemption.cancelled:
        return Cancelled(message=f"cancelled at epoch {result.epochs_done} (checkpoint kept)")
    if result.stopped_early:
        tracker.increment_tag(run_id, "yoloq.preemptions")
        return Cancelled(name=PREEMPTED, message=f"preempted at epoch {result.epochs_done}")
    if result.finished:
        summary.update(_finish(job, job_id, result, tracker, run_id))
    return summary


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
        batch = int(os.environ.get(settings.REDUCED_BATCH_ENV) or job.batch)
    if batch == job.batch:
        return job
    logger.warning("job %s trains with batch %d instead of %d (reduced to fit its GPU)",
                   job.name, batch, job.batch)
    tracker.set_tags(run_id, {"yoloq.reduced_batch": str(batch)})
    return job.model_copy(update={"batch": batch})


def _finish(job: JobSpec, job_id: str, result: Any, tracker: Any, run_id: str) -> dict[str, Any]:
    """Evaluate and export the final weights, log them, end the MLflow run."""
    save_dir = Path(result.save_dir)
    extras = [p for p in (save_dir / "results.csv", result.best) if p and Path(p).exists()]
    extras += sorted(save_dir.glob("*.png"))
    tracker.log_artifacts(run_id, [Path(p) for p in extras], artifact_path="training")
    evaluation = evaluate_task(job, result.best, tracker, run_id)
    exports = export_task(job, job_id, result.best, tracker, run_id) if job.export else []
    tracker.finish(run_id)
    return {"evaluation": evaluation, "exports": exports}


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

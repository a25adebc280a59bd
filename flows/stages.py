"""Evaluate and export as Prefect tasks: results go to MLflow and Prefect artifacts.

`finalise` runs them for a job whose epochs are all trained, each step at most once:
a step done is recorded as a tag on the job's MLflow run, so a segment that finalises
again after a crash skips it, and the MLflow run ends FINISHED last. Then the segment's
own flow run gets `yoloq.finalised` (`mark_finalised`): what the job's parent reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from yoloq.base.paths import state_paths
from yoloq.domain.contract import TAG_EVAL_SPLIT
from yoloq.domain.contract import TAG_EVALUATED as EVALUATED_TAG
from yoloq.domain.contract import TAG_EXPORTED as EXPORTED_TAG
from yoloq.domain.spec import JobSpec


def _artifact_key(job_id: str, what: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes."""
    safe = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    return f"{safe}-{what}"[:100]


def finalise(job: JobSpec, job_id: str, tracker: Any, run_id: str, save_dir: Path, epoch: int,
             best: Path | None = None, checkpoint: Path | None = None) -> dict[str, Any]:
    """Evaluate and export the final weights of `epoch` (`best`, else best.pt inside the
    finished `checkpoint`), log them, end the MLflow run. Steps already done for this epoch
    are skipped (an extended job finalises again at its new last epoch)."""
    from yoloq.engine.checkpoint import finished_best, restore_results_csv

    save_dir = Path(save_dir)
    if best is None:
        save_dir.mkdir(parents=True, exist_ok=True)
        best = finished_best(checkpoint, save_dir / "best.pt")
        restore_results_csv(save_dir / "results.csv", _train_results(checkpoint))
    extras = [p for p in (save_dir / "results.csv", best) if p and Path(p).exists()]
    extras += sorted(save_dir.glob("*.png"))
    tracker.log_artifacts(run_id, [Path(p) for p in extras], artifact_path="training")
    done = tracker.client.get_run(run_id).data.tags
    summary: dict[str, Any] = {}
    if done.get(EVALUATED_TAG) != str(epoch):
        summary["evaluation"] = evaluate_task(job, best, tracker, run_id)
        tracker.set_tags(run_id, {EVALUATED_TAG: str(epoch)})
    if job.export and done.get(EXPORTED_TAG) != str(epoch):
        summary["exports"] = export_task(job, job_id, best, tracker, run_id)
        tracker.set_tags(run_id, {EXPORTED_TAG: str(epoch)})
    tracker.finish(run_id)
    mark_finalised(epoch)
    return summary


def mark_finalised(epoch: int) -> None:
    """Label this segment's run with the epoch it finalised: the job's MLflow run is ended
    (its parent then stops, unless the job was extended past that epoch)."""
    from prefect import get_run_logger
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    from yoloq.base.retry import patiently
    from yoloq.domain.contract import FINALISED_LABEL

    run_id = flow_run.get_id()
    if run_id is None:  # called outside a flow run (a test calling in)
        return

    def write() -> None:
        with get_client(sync_client=True) as client:
            client.update_flow_run_labels(run_id, {FINALISED_LABEL: str(epoch)})

    patiently(write, "labelling the segment finalised", get_run_logger())


def _train_results(checkpoint: Path) -> dict[str, list[Any]] | None:
    from yoloq.analysis.fingerprint import read_header

    results = read_header(checkpoint).get("train_results")
    return results if isinstance(results, dict) else None


@task(name="evaluate")
def evaluate_task(job: JobSpec, weights: Path, tracker: Any, run_id: str) -> dict[str, Any]:
    """Validate the best weights on the test split (else val); log and publish the table."""
    from yoloq.engine.evaluate import evaluate

    workdir = state_paths().scratch / "evaluate" / run_id
    result = evaluate(Path(weights), Path(job.data), imgsz=job.imgsz, batch=job.batch,
                      workdir=workdir)
    tracker.log_metrics(run_id, {f"eval/{k}": v for k, v in result.metrics.items()})
    tracker.set_tags(run_id, {TAG_EVAL_SPLIT: result.split})
    rows = result.table or [{"metric": k, "value": round(v, 4)} for k, v in result.metrics.items()]
    create_table_artifact(key=_artifact_key(run_id, "evaluation"), table=rows,
                          description=f"Evaluation of best.pt on the {result.split} split")
    return {"split": result.split, "metrics": result.metrics}


@task(name="export")
def export_task(job: JobSpec, job_id: str, weights: Path, tracker: Any,
                run_id: str) -> list[dict[str, Any]]:
    """Export, verify by loading and validating, log and register each format."""
    from yoloq.engine.export import export

    dest = state_paths().exports / job_id
    exported = export(Path(weights), job.export, dest, Path(job.data), imgsz=job.imgsz)
    rows = []
    for model in exported:
        version = tracker.register_model(run_id, Path(model.path), job.name)
        rows.append({"format": model.format, "path": str(model.path), "size_mb":
                     round(model.size / 1e6, 2), "registered_version": version})
    create_markdown_artifact(
        key=_artifact_key(job_id, "exports"),
        markdown="\n".join(f"- **{r['format']}**: `{r['path']}` ({r['size_mb']} MB), "
                           f"model `{job.name}` v{r['registered_version']}" for r in rows),
        description="Exported models")
    return rows

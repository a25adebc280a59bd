"""A tiny job end to end on the real stack: analyse, train (2 segments), evaluate, export."""

from __future__ import annotations

import json

import pytest

from stack_helpers import wait_final, write_spec, yoloq

pytestmark = [pytest.mark.service, pytest.mark.training]


def test_tiny_job_end_to_end(yoloq_stack, tiny_dataset, tmp_path):
    """4 epochs in 2 segments: one MLflow run with exactly 4 steps per metric, the exported
    model registered, evaluate's table artifact in Prefect."""
    spec = write_spec(tmp_path / "job.yaml", tiny_dataset, epochs=4, segment_epochs=2)
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job_id"]

    status = wait_final(job_id)
    assert status["state"] == "Completed", status
    assert status["epochs_done"] == 4
    assert status["segments"] == 2

    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    for metric in ("metrics/mAP50-95B", "metrics/precisionB", "train/box_loss", "val/box_loss",
                   "lr/pg0"):
        history = client.get_metric_history(run.info.run_id, metric)
        assert sorted(m.step for m in history) == [1, 2, 3, 4], metric  # every epoch delivered
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    # MLflow skips a (metric, step) already logged, so only the epoch ledger can show a repeat
    assert trainings_per_epoch(epoch_trainings(job_id)) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert run.data.tags["yoloq.segments"] == "2"
    params = run.data.params
    assert params["spec.epochs"] == "4" and params["spec.team"] == "vision"
    assert params["train.seed"] == "0" and params["analysis.job_class"] in ("short", "full")
    versions = client.search_model_versions("name = 'e2e'")
    assert versions, "the exported model is registered"

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect:
        arts = prefect.read_artifacts(limit=200)
    assert any(a.type == "table" and "evaluation" in (a.key or "") for a in arts)


def test_bad_spec_is_rejected_before_queueing(yoloq_stack, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "bad.yaml", tiny_dataset, imgsz=100)
    out = yoloq("submit", str(spec))
    assert out.returncode == 2
    assert "imgsz" in out.stderr and "Traceback" not in out.stderr

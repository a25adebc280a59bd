"""`yoloq extend` on the session stack: a completed 2-epoch job extended to 3 trains epoch 3
only, in the same MLflow run, and every surface shows the new total; through the REST API a
queued or running job is extended by its own team (another team's token is refused and changes nothing)."""

from __future__ import annotations

import json

import httpx
import pytest
from stack_helpers import wait_final, write_spec, yoloq
from test_api import _make_tokens, _restore_policy, bearer, job_spec

pytestmark = [pytest.mark.service, pytest.mark.training]


def _trainings(job_id: str) -> dict[int, int]:
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    return trainings_per_epoch(epoch_trainings(job_id))


def _mlflow_run(job_id: str):
    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    return client, runs


def test_a_completed_job_extended_trains_only_the_new_epochs_in_one_run(yoloq_stack, tiny_dataset,
                                                                         tmp_path):
    spec = write_spec(tmp_path / "job.yaml", tiny_dataset, name="extend-cli", epochs=2, export=[])
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job_id"]
    assert wait_final(job_id)["state"] == "Completed"

    shrink = yoloq("extend", job_id, "--epochs", "2")
    assert shrink.returncode != 0 and "Traceback" not in shrink.stderr
    assert shrink.stderr.strip().count("\n") == 0 and "epochs" in shrink.stderr, shrink.stderr

    out = yoloq("extend", job_id, "--epochs", "3", "--reason", "still improving", "--json")
    assert out.returncode == 0, out.stderr
    extension = json.loads(out.stdout)
    assert (extension["old_epochs"], extension["new_epochs"], extension["epochs_done"],
            extension["restarted"]) == (2, 3, 2, True)
    status = wait_final(job_id)
    assert status["state"] == "Completed", status
    assert (status["epochs"], status["epochs_done"]) == (3, 3)
    assert _trainings(job_id) == {1: 1, 2: 1, 3: 1}, "only the new epoch was trained"

    client, runs = _mlflow_run(job_id)
    assert len(runs) == 1, "the extension continues the job's MLflow run"
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "metrics/mAP50-95B")) == [1, 2, 3]
    assert run.data.tags["yoloq.epochs"] == "3" and run.data.tags["yoloq.stage.evaluated"] == "3"
    assert run.data.params["spec.epochs"] == "2"  # params keep what was submitted

    history = yoloq("history", job_id)
    assert history.returncode == 0, history.stderr
    assert "epochs extended" in history.stdout and "2 -> 3 epochs" in history.stdout, history.stdout

    again = yoloq("extend", job_id, "--epochs", "3")
    assert again.returncode != 0 and "not more than the job's 3 epochs" in again.stderr, again.stderr


def test_rest_extends_a_queued_job_for_its_own_team_only(yoloq_stack, tiny_dataset):
    from blocks.policy import saved_block

    before = saved_block()
    try:
        tokens = _make_tokens(yoloq_stack)
        vision, token = tokens["vision"]
        _, other = tokens["audio"]
        with httpx.Client(base_url=yoloq_stack.rest_url, timeout=120) as api:
            made = api.post("/v1/jobs", json=job_spec(tiny_dataset, vision, "extend-api"), headers=bearer(token))
            assert made.status_code == 201, made.text
            job_id = made.json()["job_id"]
            refused = api.post(f"/v1/jobs/{job_id}/epochs", json={"epochs": 4}, headers=bearer(other))
            assert refused.status_code == 403, refused.text
            assert api.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()["epochs"] == 2
            bad = api.post(f"/v1/jobs/{job_id}/epochs", json={"epochs": 1}, headers=bearer(token))
            assert bad.status_code == 422 and bad.json()["detail"]["field"] == "epochs", bad.text
            done = api.post(f"/v1/jobs/{job_id}/epochs", json={"epochs": 3}, headers=bearer(token))
            assert done.status_code == 200, done.text
            assert done.json()["new_epochs"] == 3  # queued or running: it trains on either way
            status = wait_final(job_id)
            assert status["state"] == "Completed" and (status["epochs"], status["epochs_done"]) == (3, 3), status
            assert _trainings(job_id) == {1: 1, 2: 1, 3: 1}
            assert api.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()["epochs"] == 3
    finally:
        _restore_policy(before)

"""Fine-tune from a job (`model: job:<id>[:best|:last]`) on the session stack: a job that
names a finished job's weights is analysed against them (fingerprinted as a `.pt`), trains from
them and completes; through the REST API the same reference is admitted for the caller's team,
and an unknown job is one line from the CLI and a 422 from REST."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from stack_helpers import wait_final, write_spec, yoloq
from test_api import _make_tokens, _restore_policy, bearer, job_spec

pytestmark = [pytest.mark.service, pytest.mark.training]


@pytest.fixture(scope="module")
def finished_job(yoloq_stack, tiny_dataset, tmp_path_factory) -> str:
    spec = write_spec(tmp_path_factory.mktemp("source") / "a.yaml", tiny_dataset, name="ft-source",
                      epochs=1, export=[])
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job_id"]
    assert wait_final(job_id)["state"] == "Completed"
    return job_id


def test_a_job_fine_tunes_from_a_finished_jobs_best_weights(finished_job, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "b.yaml", tiny_dataset, name="ft-child", epochs=1, export=[],
                      model=f"job:{finished_job}")
    analysed = yoloq("analyse", str(spec), "--json")
    assert analysed.returncode == 0, analysed.stderr
    weights = Path(json.loads(analysed.stdout)["weights"])
    assert weights.is_file() and weights.parent.name == finished_job
    assert not json.loads(analysed.stdout)["trains_from_scratch"]
    source = torch.load(weights, map_location="cpu", weights_only=False)
    assert source.get("yoloq") is None and source.get("optimizer") is None, "a plain stripped .pt"

    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout)["job_id"]
    assert wait_final(child)["state"] == "Completed"

    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                               filter_string=f"tags.`yoloq.job_id` = '{child}'")
    assert run.data.params["spec.model"] == f"job:{finished_job}"  # the reference, not a node's path


def test_an_unknown_job_is_one_line_from_the_cli(yoloq_stack, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "c.yaml", tiny_dataset, name="ft-missing", model="job:no-such-job")
    out = yoloq("submit", str(spec))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "job:no-such-job: no job of that id has weights" in out.stderr


def test_rest_admits_the_reference_for_the_callers_team(yoloq_stack, finished_job, tiny_dataset):
    from blocks.policy import saved_block

    before = saved_block()
    try:
        tokens = _make_tokens(yoloq_stack)
        team, token = tokens["audio"]
        with httpx.Client(base_url=yoloq_stack.rest_url, timeout=120) as api:
            good = api.post("/v1/analyse", json=job_spec(tiny_dataset, team, "ft-rest",
                                                         model=f"job:{finished_job}:last"),
                            headers=bearer(token))
            assert good.status_code == 200, good.text
            assert good.json()["accepted"], good.text
            bad = api.post("/v1/analyse", json=job_spec(tiny_dataset, team, "ft-rest", model="job:no-such-job"),
                           headers=bearer(token))
            assert bad.status_code == 422 and bad.json()["detail"]["field"] == "model", bad.text
    finally:
        _restore_policy(before)

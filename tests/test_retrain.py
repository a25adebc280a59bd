"""The retraining trigger in prefect.yaml: a `dataset.updated` event for a dataset starts
`retrain`, which resubmits the latest job of each spec training on it."""

from __future__ import annotations

import time

import pytest

from stack_helpers import write_spec, yoloq

pytestmark = pytest.mark.service


def yolo_jobs_named(name: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import list_jobs

    with get_client(sync_client=True) as client:
        return [j for j in list_jobs(client) if j.job_id.startswith(f"{name}-")]


def test_dataset_updated_event_retrains_jobs_using_it(yoloq_stack, session_dir, tmp_path):
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(session_dir / "retrain-shapes", train=4, val=2, imgsz=64, seed=5)
    spec = write_spec(tmp_path / "retrain.yaml", data, name="retrain-me", priority="low",
                      epochs=1, export=[])
    first = yoloq("submit", str(spec), "--json")
    assert first.returncode == 0, first.stderr
    assert len(yolo_jobs_named("retrain-me")) == 1

    out = yoloq("dataset", "updated", str(data))
    assert out.returncode == 0, out.stderr

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(yolo_jobs_named("retrain-me")) < 2:
        time.sleep(1)
    jobs = yolo_jobs_named("retrain-me")
    assert len(jobs) == 2, "the trigger resubmitted the job that trains on the dataset"
    for job in jobs:  # no need to train them here
        yoloq("cancel", job.job_id)


def test_unknown_dataset_is_a_one_line_error(yoloq_stack, tmp_path):
    out = yoloq("dataset", "updated", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "data:" in out.stderr and "Traceback" not in out.stderr

"""Every task yoloq trains, through the session stack: 2-epoch segmentation, oriented-box,
classification, semantic segmentation and depth jobs complete with one epoch per segment (evaluate and export included), and a pose job is
preempted by an urgent job at an epoch boundary, resumes, and ends bit-identical to the same job
trained without interruption. MLflow gets each task's own metrics once per epoch."""

from __future__ import annotations

import json

import pytest
import torch

from stack_helpers import wait_final, write_spec, yoloq
from test_preemption_stack import SEGMENT_CLI, submit, submit_while_frozen, wait_running

pytestmark = [pytest.mark.service, pytest.mark.training]


@pytest.fixture(scope="module")
def datasets(session_dir):
    from yoloq.datasets.synth import synth_dataset

    return {task: synth_dataset(session_dir / f"shapes-{task}", train=16, val=8, imgsz=64, seed=0, task=task)
            for task in ("segment", "pose", "obb", "classify", "semantic", "depth")}


def _mlflow(job_id: str):
    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                               filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    return client, run


def _steps(job_id: str, metric: str) -> list[int]:
    client, run = _mlflow(job_id)
    return sorted(m.step for m in client.get_metric_history(run.info.run_id, metric))


def _trainings(job_id: str) -> dict[int, int]:
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    return trainings_per_epoch(epoch_trainings(job_id))


@pytest.mark.parametrize("task, model, metric", [
    ("segment", "yolov8n-seg.yaml", "metrics/mAP50-95M"),
    ("obb", "yolov8n-obb.yaml", "metrics/mAP50-95B"),
    ("classify", "yolov8n-cls.yaml", "metrics/accuracy_top1"),
    ("semantic", "yolo26n-sem.yaml", "metrics/mIoU"),
    ("depth", "yolo26n-depth.yaml", "metrics/delta1"),
])
def test_a_two_epoch_job_completes_one_epoch_per_segment(yoloq_stack, datasets, tmp_path, task, model, metric):
    spec = write_spec(tmp_path / "job.yaml", datasets[task], name=f"task-{task}", model=model, epochs=2,
                      segment_epochs=1)
    job = submit(spec)
    status = wait_final(job)
    assert status["state"] == "Completed", status
    assert (status["epochs_done"], status["segments"]) == (2, 2)
    assert _trainings(job) == {1: 1, 2: 1}
    assert _steps(job, metric) == [1, 2], f"{task}'s own metric, once per epoch"
    _, run = _mlflow(job)
    assert run.info.status == "FINISHED" and run.data.tags["yoloq.stage.exported"] == "2"
    from yoloq.api.web_data import mlflow_run

    assert [step for step, _ in mlflow_run(job)["curves"][metric]] == [1, 2], "the job page draws its metric"


def test_a_pose_job_is_preempted_resumes_and_ends_bit_identical(yoloq_stack, datasets, tiny_dataset, tmp_path):
    epochs = 3
    spec = write_spec(tmp_path / "pose.yaml", datasets["pose"], name="task-pose", model="yolov8n-pose.yaml",
                      priority="low", epochs=epochs, segment_epochs=epochs, export=[])
    urgent_spec = write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="urgent-for-pose", team="oncall",
                             priority="urgent", epochs=1, segment_epochs=1, export=[])
    pose = submit(spec)
    victim = wait_running(pose)
    urgent = submit_while_frozen(victim, urgent_spec)
    assert wait_final(urgent)["state"] == "Completed"
    status = wait_final(pose)
    assert status["state"] == "Completed" and status["preemptions"] >= 1, status
    assert _trainings(pose) == {e: 1 for e in range(1, epochs + 1)}
    assert _steps(pose, "metrics/mAP50-95P") == list(range(1, epochs + 1))

    import subprocess
    import sys

    from blocks import stores

    restored = stores.checkpoint_store().restore(pose, tmp_path / "restored")
    result_file = tmp_path / "one-go.json"
    proc = subprocess.run([sys.executable, str(SEGMENT_CLI), "--spec", str(spec), "--workdir",
                           str(tmp_path / "one-go"), "--stop-after", str(epochs), "--result", str(result_file)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_go = torch.load(json.loads(result_file.read_text())["result"]["checkpoint"], map_location="cpu",
                        weights_only=False)["yoloq"]
    queued = torch.load(restored.path, map_location="cpu", weights_only=False)["yoloq"]
    for part in ("model", "ema"):
        differing = [k for k, v in one_go[part].items() if not torch.equal(v, queued[part][k])]
        assert not differing, f"{part}: {len(differing)} tensors differ"


def test_a_yolonas_job_completes_one_epoch_per_segment_in_its_own_engine(yoloq_stack, tiny_dataset, tmp_path):
    """YOLO-NAS through the whole flow: each segment runs the engine's runner in its own
    environment, resumes the previous segment's checkpoint, and the job is evaluated and
    exported (ONNX, verified) into one MLflow run with the detection metric names."""
    spec = write_spec(tmp_path / "nas.yaml", tiny_dataset, name="task-nas", model="yolo_nas_s", epochs=2,
                      segment_epochs=1, export=["onnx"])
    job = submit(spec)
    status = wait_final(job)
    assert status["state"] == "Completed", status
    assert (status["epochs_done"], status["segments"]) == (2, 2)
    assert _trainings(job) == {1: 1, 2: 1}
    assert _steps(job, "metrics/mAP50-95B") == [1, 2]
    assert _steps(job, "train/loss") == [1, 2]
    client, run = _mlflow(job)
    assert run.info.status == "FINISHED" and run.data.tags["yoloq.stage.exported"] == "2"
    assert "eval/metrics/mAP50-95B" in run.data.metrics
    registered = [v for m in client.search_registered_models() for v in m.latest_versions or ()
                  if v.run_id == run.info.run_id]
    assert registered, "the verified ONNX export is registered"

"""Exact resume for every task yoloq trains besides detection (tests/test_exact_resume.py):
a segmentation, pose, oriented-box and classification job trained as 1 x 2 epochs and as 2 x 1 epochs (each
segment a fresh process resuming from a moved checkpoint) ends bit-identical, every tensor of
the model and its EMA, and reports the task's own metrics (mask, pose, OBB, top-5) once per epoch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from test_exact_resume import exact_weights, run_cli
from yoloq.datasets.synth import synth_dataset

pytestmark = pytest.mark.training

TASKS = {  # task -> (model, a metric only that task reports)
    "segment": ("yolov8n-seg.yaml", "metrics/mAP50-95(M)"),
    "pose": ("yolov8n-pose.yaml", "metrics/mAP50-95(P)"),
    "obb": ("yolov8n-obb.yaml", "metrics/mAP50-95(B)"),
    "classify": ("yolov8n-cls.yaml", "metrics/accuracy_top5"),
    "semantic": ("yolo26n-sem.yaml", "metrics/mIoU"),
    "depth": ("yolo26n-depth.yaml", "metrics/delta1"),
}


@pytest.mark.parametrize("task", list(TASKS))
def test_two_segments_match_one_go_bit_for_bit(task, tmp_path):
    model, metric = TASKS[task]
    data = synth_dataset(tmp_path / "data", train=16, val=8, imgsz=64, nc=3, seed=0, task=task)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": f"exact-{task}", "team": "engine", "model": model, "data": str(data), "epochs": 2,
        "imgsz": 64, "batch": 4, "train_args": {"seed": 3, "plots": False, "close_mosaic": 1, "nbs": 8,
                                                 "workers": 0}}))
    whole = run_cli(spec, tmp_path / "one-go", 2)
    first = run_cli(spec, tmp_path / "first", 1)
    moved = tmp_path / "store" / "epoch1.ckpt"
    moved.parent.mkdir()
    shutil.move(first["result"]["checkpoint"], moved)
    second = run_cli(spec, tmp_path / "second", 2, resume_from=moved)
    assert whole["result"]["finished"] and second["result"]["finished"]

    expected = exact_weights(Path(whole["result"]["checkpoint"]))
    actual = exact_weights(Path(second["result"]["checkpoint"]))
    for part in ("model", "ema"):
        assert expected[part].keys() == actual[part].keys()
        differing = [k for k, t in expected[part].items() if not torch.equal(t, actual[part][k])]
        assert not differing, f"{task} {part}: {len(differing)} tensors differ, e.g. {differing[:3]}"
    epochs = first["epochs"] + second["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert epochs == whole["epochs"], "the same metrics, epoch by epoch"
    assert all(metric in e["metrics"] for e in epochs), f"{task} reports {metric}"


@pytest.mark.parametrize("task", list(TASKS))
def test_an_export_of_each_task_loads_back_as_that_task(task, tmp_path):
    """TorchScript and ONNX: each file validated as its model's task (the task's own metric comes
    back); `export` itself raises when the raw output on one input strays from PyTorch's."""
    from yoloq.engine.export import export

    model, metric = TASKS[task]
    data = synth_dataset(tmp_path / "data", train=8, val=4, imgsz=64, nc=3, seed=0, task=task)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": f"export-{task}", "team": "engine", "model": model, "data": str(data), "epochs": 1,
        "imgsz": 64, "batch": 4, "train_args": {"seed": 3, "plots": False, "workers": 0}}))
    best = Path(run_cli(spec, tmp_path / "run", 1)["result"]["best"])
    exported = export(best, ["torchscript", "onnx"], tmp_path / "export", data, imgsz=64)
    assert [e.format for e in exported] == ["torchscript", "onnx"]
    for item in exported:
        assert item.path.is_file() and metric in item.verification, (item.format, item.verification)

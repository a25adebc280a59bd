"""Evaluate and export of an original YOLOv5 model, through the pipeline's own entry points.

One tiny real job (yolov5n from the package's YAML, synthetic 64-px images, 1 epoch, CPU) trained
by the yolov5 engine; then `yoloq.engine.evaluate.evaluate` and `yoloq.engine.export.export`, which dispatch on
the weights' engine to yolov5's own val and export. The network guard fails a test on any
non-loopback attempt, so "nothing downloaded" is checked by every test here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from yoloq.engine import SegmentRequest, run_segment
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

YOLOV5N = Path(importlib.util.find_spec("yolov5").origin).parent / "models" / "yolov5n.yaml"
IMGSZ, BATCH = 64, 8
EVAL_KEYS = {"metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)",
             "fitness"}

pytestmark = [pytest.mark.training, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("yolov5-finalise")
    data = synth_dataset(root / "ds", train=8, val=4, imgsz=IMGSZ, seed=0)
    spec = parse_spec({"name": "v5final", "team": "vision", "model": str(YOLOV5N), "data": str(data),
                       "epochs": 1, "imgsz": IMGSZ, "batch": BATCH, "train_args": {"seed": 3}})
    result = run_segment(SegmentRequest(spec=spec, workdir=root / "train", stop_after_epoch=1))
    assert result.finished and result.best is not None and result.best.is_file()
    return {"root": root, "data": data, "best": result.best, "checkpoint": result.checkpoint}


def test_best_weights_are_recognised_as_yolov5(trained):
    from yoloq.engine.evaluate import is_yolov5_weights

    assert is_yolov5_weights(trained["best"])


def test_evaluate_uses_yolov5_val_with_the_ultralytics_metric_names(trained, tmp_path):
    from yoloq.engine.evaluate import evaluate

    result = evaluate(trained["best"], trained["data"], imgsz=IMGSZ, batch=BATCH, workdir=tmp_path)
    assert result.split == "val"  # synth_dataset writes no test split
    assert set(result.metrics) == EVAL_KEYS
    assert all(0.0 <= v <= 1.0 for v in result.metrics.values())
    assert set(result.speed_ms) == {"preprocess", "inference", "postprocess"}
    assert result.save_dir == tmp_path / "eval" and (tmp_path / "eval" / "results.html").is_file()
    for row in result.per_class:  # empty when the 1-epoch model found nothing
        assert {"Class", "Instances", "mAP50", "mAP50-95"} <= row.keys()


def test_evaluate_prefers_the_test_split(trained, tmp_path):
    import yaml

    from yoloq.engine.evaluate import evaluate

    config = yaml.safe_load(Path(trained["data"]).read_text())
    config["test"] = config["val"]
    data = tmp_path / "with-test.yaml"
    config["path"] = str(Path(trained["data"]).parent / config.get("path", "."))
    data.write_text(yaml.safe_dump(config))
    result = evaluate(trained["best"], data, imgsz=IMGSZ, batch=BATCH, workdir=tmp_path / "w")
    assert result.split == "test" and set(result.metrics) == EVAL_KEYS


def test_export_torchscript_loads_and_runs(trained, tmp_path):
    import torch

    from yoloq.engine.yolov5.finalise import one_image
    from yoloq.engine.export import export

    exported = export(trained["best"], ["torchscript"], tmp_path / "exports", trained["data"], imgsz=IMGSZ)
    assert [m.format for m in exported] == ["torchscript"]
    model = exported[0]
    assert model.path.parent == tmp_path / "exports" and model.path.suffix == ".torchscript"
    assert model.size == model.path.stat().st_size > 0
    assert set(model.verification) == EVAL_KEYS and model.verified_by.startswith("yolov5 val (torchscript)")
    loaded = torch.jit.load(str(model.path), map_location="cpu")
    output = loaded(one_image(trained["data"], IMGSZ))
    output = output[0] if isinstance(output, (list, tuple)) else output
    assert output.ndim == 3 and output.shape[0] == 1 and output.shape[-1] == 5 + 3  # xywh, obj, 3 classes
    assert model.max_output_diff <= 1e-3


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="the onnx extra is not installed")
def test_export_onnx_when_the_extra_is_installed(trained, tmp_path):
    from yoloq.engine.export import export

    exported = export(trained["best"], ["onnx"], tmp_path / "exports", trained["data"], imgsz=IMGSZ)
    assert [m.format for m in exported] == ["onnx"] and exported[0].path.suffix == ".onnx"
    assert set(exported[0].verification) == EVAL_KEYS


def test_best_rebuilt_from_the_finished_checkpoint_evaluates(trained, tmp_path):
    """A segment that finalises after a crash rebuilds best.pt from the checkpoint first."""
    from yoloq.engine.checkpoint import finished_best
    from yoloq.engine.evaluate import evaluate, is_yolov5_weights

    best = finished_best(trained["checkpoint"], tmp_path / "best.pt")
    assert is_yolov5_weights(best)
    result = evaluate(best, trained["data"], imgsz=IMGSZ, batch=BATCH, workdir=tmp_path / "w")
    assert set(result.metrics) == EVAL_KEYS

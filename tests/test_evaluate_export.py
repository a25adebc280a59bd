"""Evaluate and export a tiny real model (ultralytics on CPU), register it in a real MLflow store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from yoloq.base.errors import UserError
from yoloq.engine.evaluate import evaluate, load_yolo
from yoloq.engine.export import export
from yoloq.datasets.synth import synth_dataset
from yoloq.records.tracking import TAG_JOB_ID, JobTracker

pytestmark = pytest.mark.training
IMGSZ = 32


def _boxes(labels: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in labels.glob("*.txt"))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train/val from yoloq.datasets.synth, plus a test split with a different number of boxes."""
    root = tmp_path_factory.mktemp("data")
    data = synth_dataset(root / "shapes", train=8, val=3, imgsz=IMGSZ, nc=3, seed=0)
    donor = synth_dataset(root / "donor", train=1, val=6, imgsz=IMGSZ, nc=3, seed=1)
    for kind in ("images", "labels"):
        shutil.move(str(donor.parent / kind / "val"), str(data.parent / kind / "test"))
    config = yaml.safe_load(data.read_text())
    without_test = data.with_name("no_test.yaml")
    without_test.write_text(yaml.safe_dump(config))
    data.write_text(yaml.safe_dump({**config, "test": "images/test"}))
    counts = {split: _boxes(data.parent / "labels" / split) for split in ("val", "test")}
    assert counts["val"] != counts["test"]
    return {"data": data, "no_test": without_test, **{f"{k}_boxes": v for k, v in counts.items()}}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The current folder while models are trained, evaluated and exported."""
    return tmp_path_factory.mktemp("cwd")


@pytest.fixture(scope="module")
def best(dataset: dict[str, Path], workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One epoch of yolov8n at 32 px on 8 images (a few seconds on CPU)."""
    runs = tmp_path_factory.mktemp("runs")
    before, test_name = os.getcwd(), os.environ.get("PYTEST_CURRENT_TEST", "")
    os.chdir(workspace)
    # ultralytics' MLflow callback skips pytest runs unless the test is named test_mlflow...:
    # claim that name, so only yoloq's settings keep the callback off.
    os.environ["PYTEST_CURRENT_TEST"] = "tests/test_mlflow_callback.py::test_mlflow (call)"
    try:
        model = load_yolo(Path("yolov8n.yaml"))
        model.train(data=str(dataset["data"]), epochs=1, imgsz=IMGSZ, batch=4, device="cpu",
                    workers=0, project=str(runs), name="train", exist_ok=True, plots=False,
                    val=False, amp=False, seed=0, verbose=False)
    finally:
        os.environ["PYTEST_CURRENT_TEST"] = test_name
        os.chdir(before)
    weights = runs / "train" / "weights" / "best.pt"
    assert weights.is_file()
    return weights


def test_evaluate_uses_the_test_split_when_present(best: Path, dataset: dict, tmp_path: Path) -> None:
    result = evaluate(best, dataset["data"], imgsz=IMGSZ, batch=4, workdir=tmp_path)
    assert result.split == "test"
    assert {"metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)",
            "metrics/mAP50-95(B)"} <= set(result.metrics)
    assert all(isinstance(v, float) for v in result.metrics.values())
    assert sum(row["Instances"] for row in result.per_class) == dataset["test_boxes"]
    assert {row["Class"] for row in result.table} <= {"rectangle", "ellipse", "triangle"}
    assert result.save_dir is not None and result.save_dir.is_relative_to(tmp_path)


def test_evaluate_falls_back_to_val(best: Path, dataset: dict, tmp_path: Path) -> None:
    result = evaluate(best, dataset["no_test"], imgsz=IMGSZ, batch=4, workdir=tmp_path)
    assert result.split == "val"
    assert sum(row["Instances"] for row in result.per_class) == dataset["val_boxes"]


def test_export_torchscript_verifies_and_registers(best: Path, dataset: dict, tmp_path: Path) -> None:
    dest = tmp_path / "exports"
    [model] = export(best, [], dest, dataset["data"], imgsz=IMGSZ)  # default: TorchScript
    assert model.format == "torchscript"
    assert model.path.parent == dest and model.path.suffix == ".torchscript"
    assert model.size == model.path.stat().st_size > 1000
    assert "metrics/mAP50-95(B)" in model.verification
    assert "torchscript" in model.verified_by
    assert 0 <= model.max_output_diff < 1e-2

    tracker = JobTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "yoloq-test")
    run_id = tracker.run_for_job("job-export")
    assert tracker.register_model(run_id, model.path, "job-export") == "1"
    assert tracker.register_model(run_id, model.path, "job-export") == "1"  # a retry adds nothing
    [version] = tracker.client.search_model_versions("name = 'job-export'")
    assert version.run_id == run_id and version.tags[TAG_JOB_ID] == "job-export"
    assert version.source.endswith("/model/best.torchscript")
    assert [f.path for f in tracker.client.list_artifacts(run_id, "model")] == ["model/best.torchscript"]


def test_export_onnx_is_checked_and_validated(best: Path, dataset: dict, tmp_path: Path) -> None:
    models = export(best, ["ONNX", "torchscript", "onnx"], tmp_path, dataset["data"], imgsz=IMGSZ)
    assert [m.format for m in models] == ["onnx", "torchscript"]
    onnx_model = models[0]
    assert onnx_model.path.suffix == ".onnx" and onnx_model.size > 1000
    assert "onnx.checker" in onnx_model.verified_by
    assert "metrics/mAP50(B)" in onnx_model.verification
    assert 0 <= onnx_model.max_output_diff < 1e-2


def test_unknown_format_is_a_user_error(best: Path, dataset: dict, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown format 'tflite'"):
        export(best, ["tflite"], tmp_path / "out", dataset["data"], imgsz=IMGSZ)
    assert not (tmp_path / "out").exists()


def test_missing_onnx_is_a_one_line_user_error_before_any_work(best: Path, dataset: dict,
                                                               tmp_path: Path) -> None:
    dest = tmp_path / "never"
    script = textwrap.dedent(f"""
        import sys
        sys.modules["onnx"] = None  # as if the onnx extra were not installed
        from pathlib import Path
        from yoloq.base.errors import UserError
        from yoloq.engine.export import export
        try:
            export(Path({str(best)!r}), ["torchscript", "onnx"], Path({str(dest)!r}),
                   Path({str(dataset["data"])!r}), imgsz={IMGSZ})
        except UserError as error:
            print(error.line())
            print("ultralytics imported:", "ultralytics" in sys.modules)
            sys.exit(error.exit_code)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "export: ONNX export needs the onnx package (fix: pip install 'yoloq[onnx]')",
        "ultralytics imported: False",
    ]
    assert not dest.exists()


def test_ultralytics_mlflow_callback_stays_off(best: Path, dataset: dict, workspace: Path) -> None:
    from ultralytics.utils import SETTINGS

    before = os.getcwd()
    os.chdir(workspace)
    try:
        evaluate(best, dataset["data"], imgsz=IMGSZ, batch=4, workdir=workspace / "eval")
    finally:
        os.chdir(before)
    assert SETTINGS["mlflow"] is False
    leftovers = {p.name for p in workspace.iterdir()} & {"mlflow.db", "mlruns", "runs", "mlartifacts"}
    assert not leftovers


@pytest.mark.parametrize("change, message", [
    pytest.param("perturb", "outputs differ from PyTorch's", id="same-shape-other-weights"),
    pytest.param("untrained-80-classes", "output shape", id="other-architecture"),
])
def test_output_check_rejects_an_export_of_other_weights(best: Path, dataset: dict, tmp_path: Path,
                                                         change: str, message: str) -> None:
    import torch

    from yoloq.engine.export import ExportVerificationError, _output_difference

    [model] = export(best, ["torchscript"], tmp_path / "exports", dataset["data"], imgsz=IMGSZ)
    other = tmp_path / "other.pt"
    if change == "perturb":
        checkpoint = torch.load(best, weights_only=False)
        for parameter in checkpoint["model"].parameters():
            parameter.data.mul_(1.5)
        torch.save(checkpoint, other)
    else:
        load_yolo(Path("yolov8n.yaml")).save(other)
    with pytest.raises(ExportVerificationError, match=message):
        _output_difference(other, model.path, IMGSZ, "cpu")

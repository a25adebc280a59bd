"""Admission of a classification dataset (a folder of class folders): what ultralytics'
`check_cls_dataset` and `ClassificationDataset` would accept passes; what they would split in
place, guess or fail on mid-training is one line naming the folder or file, through the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from yoloq import cli
from yoloq.analysis.class_folders import validate_class_folders
from yoloq.base.errors import DatasetError
from yoloq.datasets.synth import SHAPES, synth_dataset

NAMES = tuple(sorted(SHAPES[:3]))  # ultralytics' class order: train's folders, sorted


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return synth_dataset(tmp_path / "cls", train=6, val=3, imgsz=32, nc=3, seed=0, task="classify")


def _analyse(tmp_path: Path, data: Path | str, model: str = "yolov8n-cls.yaml", capsys=None) -> tuple[int, str]:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "cls", "team": "vision", "model": model, "data": str(data),
                                    "epochs": 2, "imgsz": 32, "batch": 4}))
    code = cli.main(["analyse", str(spec)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_good_folder_is_analysed_as_classification(folder, tmp_path, capsys):
    info = validate_class_folders(folder)
    assert info.names == NAMES and (info.images("train"), info.images("val")) == (6, 3)
    assert info.warnings == ()
    code, out = _analyse(tmp_path, folder, capsys=capsys)
    assert code == 0, out
    assert "classify" in out and "3 classes (ellipse, rectangle, triangle); 6 train / 3 val images" in out


def test_test_folder_serves_as_val_when_there_is_none(folder):
    (folder / "val").rename(folder / "test")
    info = validate_class_folders(folder)
    assert info.images("val") == 3 and info.splits["val"].sources == (str(folder / "test"),)


@pytest.mark.parametrize("break_it, field, expect", [
    pytest.param(lambda f: (f / "train").rename(f / "images"), "data", "has no train/ folder", id="no-train"),
    pytest.param(lambda f: shutil.rmtree(f / "val"), "data", "has no val/ (or validation/, valid/) or test/",
                 id="no-val"),
    pytest.param(lambda f: [p.unlink() for p in (f / "train" / "ellipse").iterdir()], "data.train",
                 "train/ellipse has no images", id="empty-class"),
    pytest.param(lambda f: (f / "train" / "ellipse" / "broken.jpg").write_bytes(b"not a jpeg"), "data.train",
                 "broken.jpg does not decode as an image", id="corrupt-image"),
    pytest.param(lambda f: _tiny(f / "val" / "triangle" / "tiny.png"), "data.val",
                 "tiny.png is 8x8 px, under ultralytics' 10 px minimum", id="tiny-image"),
    pytest.param(lambda f: [shutil.rmtree(p) for p in (f / "train").iterdir()], "data.train",
                 "has no class folders", id="no-classes"),
])
def test_a_broken_folder_is_one_line_naming_it(folder, tmp_path, capsys, break_it, field, expect):
    break_it(folder)
    with pytest.raises(DatasetError) as caught:
        validate_class_folders(folder)
    assert caught.value.field == field and expect in caught.value.line()
    code, out = _analyse(tmp_path, folder, capsys=capsys)
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and expect in lines[0], out
    assert "Traceback" not in out


def _tiny(path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (8, 8), (10, 20, 30)).save(path)


def test_a_val_class_that_train_lacks_is_a_warning(folder):
    shutil.copytree(folder / "val" / "ellipse", folder / "val" / "zebra")
    info = validate_class_folders(folder)
    assert info.names == NAMES, "the classes are train's"
    assert any("val/zebra is not in train/" in w and "leaves its images out" in w for w in info.warnings)
    assert info.images("val") == 3, "zebra's images are not counted"


def test_a_class_with_no_val_folder_is_a_warning(folder):
    shutil.rmtree(folder / "val" / "triangle")
    info = validate_class_folders(folder)
    assert any("no val/triangle folder" in w for w in info.warnings)


@pytest.mark.parametrize("model, data, expect", [
    pytest.param("yolov8n.yaml", "folder", "is a folder, the form of a classification dataset, and the model a "
                 "detection model", id="detector-on-a-folder"),
    pytest.param("yolov8n-pose.yaml", "folder", "and the model a pose model", id="pose-on-a-folder"),
    pytest.param("yolov8n-cls.yaml", "yaml", "is a data YAML (a detection-style dataset) and the model a "
                 "classification model", id="classifier-on-a-yaml"),
])
def test_a_model_and_dataset_of_different_tasks_name_both(folder, tmp_path, capsys, model, data, expect):
    target = folder if data == "folder" else synth_dataset(tmp_path / "det", train=2, val=1, imgsz=32)
    code, out = _analyse(tmp_path, target, model=model, capsys=capsys)
    assert code == 2 and expect in out and len(out.strip().splitlines()) == 1, out


def test_an_s3_classification_dataset_is_refused_with_the_reason():
    from yoloq.datasets.validate import validate_dataset

    with pytest.raises(DatasetError, match="classification datasets .* are read from a local folder"):
        validate_dataset("s3://bucket/cls", task="classify")

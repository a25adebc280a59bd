"""Admission of semantic segmentation and depth datasets (per-pixel labels): what ultralytics
trains from passes; a mask or depth map it would drop as corrupt, mid-training and in its log,
is one line naming the file; a model and a dataset of different tasks name both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from yoloq import cli
from yoloq.base.errors import DatasetError
from yoloq.datasets.synth import synth_dataset
from yoloq.datasets.validate import validate_dataset


@pytest.fixture
def semantic(tmp_path: Path) -> Path:
    return synth_dataset(tmp_path / "sem", train=4, val=2, imgsz=32, nc=3, seed=0, task="semantic")


@pytest.fixture
def depth(tmp_path: Path) -> Path:
    return synth_dataset(tmp_path / "depth", train=4, val=2, imgsz=32, seed=0, task="depth")


def _mask(data_yaml: Path, split: str = "train", index: int = 0) -> Path:
    return data_yaml.parent / "masks" / split / f"{split}_{index:05d}.png"


def _edit_yaml(data_yaml: Path, **changes) -> None:
    data = yaml.safe_load(data_yaml.read_text())
    data.update(changes)
    data_yaml.write_text(yaml.safe_dump(data))


def test_good_semantic_and_depth_datasets_pass(semantic, depth):
    info = validate_dataset(semantic, task="semantic")
    assert info.names[-1] == "background" and info.splits["train"].labelled == 4 and info.warnings == ()
    info = validate_dataset(depth, task="depth")
    assert info.splits["val"].labelled == 2 and info.warnings == ()


def test_synthetic_masks_are_the_drawn_shapes(semantic):
    """Each mask pixel holds a class id or the background; a shape's pixels are its class colour."""
    from yoloq.datasets.synth import _COLOURS

    for index in range(4):
        mask = np.asarray(Image.open(_mask(semantic, index=index)))
        image = np.asarray(Image.open(semantic.parent / "images" / "train" / f"train_{index:05d}.png"))
        assert set(np.unique(mask)) <= {0, 1, 2, 3} and (mask < 3).any()
        for cls in set(np.unique(mask)) - {3}:
            close = np.abs(image[mask == cls].astype(int) - np.array(_COLOURS[cls])).max(axis=1) <= 25
            assert close.mean() > 0.95


@pytest.mark.parametrize("break_it, where, expect", [
    pytest.param(lambda d: Image.fromarray(np.full((32, 32), 7, np.uint8)).save(_mask(d)),
                 "masks/train/train_00000.png", "mask ids [7] are not class ids (0-3) or 255", id="bad-id"),
    pytest.param(lambda d: Image.fromarray(np.zeros((16, 32), np.uint8)).save(_mask(d)),
                 "masks/train/train_00000.png", "mask is 32x16 px, its image 32x32", id="wrong-size"),
    pytest.param(lambda d: Image.new("RGB", (32, 32)).save(_mask(d)),
                 "masks/train/train_00000.png", "mask is a RGB image, not one channel", id="colour-mask"),
    pytest.param(lambda d: _mask(d).write_bytes(b"not a png"),
                 "masks/train/train_00000.png", "mask does not decode", id="corrupt"),
    pytest.param(lambda d: _edit_yaml(d, label_mapping=[1, 2]), "data.label_mapping",
                 "must be a mapping of raw mask ids", id="mapping-not-a-dict"),
])
def test_a_broken_mask_is_one_line_naming_the_file(semantic, break_it, where, expect):
    break_it(semantic)
    _assert_refused(semantic, "semantic", where, expect)


def _assert_refused(data_yaml: Path, task: str, where: str, expect: str) -> None:
    with pytest.raises(DatasetError) as caught:
        validate_dataset(data_yaml, task=task)
    assert caught.value.field == where and expect in caught.value.line(), caught.value.line()


def test_label_mapping_makes_raw_ids_valid(semantic):
    Image.fromarray(np.full((32, 32), 40, np.uint8)).save(_mask(semantic))
    with pytest.raises(DatasetError, match=r"mask ids \[40\]"):
        validate_dataset(semantic, task="semantic")
    _edit_yaml(semantic, label_mapping={40: 1, 0: 0, 1: 1, 2: 2, 3: 3})
    assert validate_dataset(semantic, task="semantic").splits["train"].labelled == 4
    _edit_yaml(semantic, label_mapping={40: "ignore_label"})
    assert validate_dataset(semantic, task="semantic").splits["train"].labelled == 4


def test_missing_masks_warn_and_none_refuses(semantic):
    _mask(semantic, index=1).unlink()
    info = validate_dataset(semantic, task="semantic")
    assert any("1 of 4 images have no mask (ultralytics leaves them out)" in w for w in info.warnings)
    for path in (semantic.parent / "masks" / "train").iterdir():
        path.unlink()
    with pytest.raises(DatasetError, match="no masks found for 4 images .looked in the masks/ mirror"):
        validate_dataset(semantic, task="semantic")


def test_polygon_rows_train_semantic_without_masks_dir_and_box_rows_are_refused(tmp_path):
    polygons = synth_dataset(tmp_path / "poly", train=3, val=1, imgsz=32, task="segment")
    assert validate_dataset(polygons, task="semantic").splits["train"].boxes >= 3
    boxes = synth_dataset(tmp_path / "boxes", train=3, val=1, imgsz=32, task="detect")
    with pytest.raises(DatasetError, match="a box row .5 columns. in the dataset of a semantic model.*masks_dir"):
        validate_dataset(boxes, task="semantic")


def _depth(data_yaml: Path, suffix: str = ".png") -> Path:
    return data_yaml.parent / "depth" / "train" / f"train_00000{suffix}"


@pytest.mark.parametrize("break_it, where, expect", [
    pytest.param(lambda d: Image.fromarray(np.zeros((32, 32), np.uint8)).convert("RGB").save(_depth(d)),
                 "depth/train/train_00000.png", "a PNG RGB image; a depth PNG is 16-bit grayscale", id="rgb"),
    pytest.param(lambda d: Image.fromarray(np.zeros((16, 32), np.uint16)).save(_depth(d)),
                 "depth/train/train_00000.png", "depth map is 32x16 px, its image 32x32: another shape",
                 id="wrong-shape"),
    pytest.param(lambda d: (_depth(d).unlink(), np.save(_depth(d, ".npy"), np.zeros((32, 32, 3), np.float32))),
                 "depth/train/train_00000.npy", "a 3-D float32 array", id="npy-3d"),
    pytest.param(lambda d: _edit_yaml(d, depth_scale=-1), "data.depth_scale", "-1 is not a positive number",
                 id="bad-scale"),
])
def test_a_broken_depth_map_is_one_line_naming_the_file(depth, break_it, where, expect):
    break_it(depth)
    _assert_refused(depth, "depth", where, expect)


def test_a_float_npy_depth_map_is_accepted(depth):
    _depth(depth).unlink()
    np.save(_depth(depth, ".npy"), np.ones((32, 32), np.float32))
    assert validate_dataset(depth, task="depth").splits["train"].labelled == 4


@pytest.mark.parametrize("model, dataset, expect", [
    pytest.param("yolov8n.yaml", "semantic", "the dataset is a semantic segmentation dataset (masks_dir in the "
                 "data YAML) and the model a detection model", id="detector-on-masks"),
    pytest.param("yolov8n-seg.yaml", "depth", "the dataset is a depth dataset (depth_scale in the data YAML) and "
                 "the model a segmentation model", id="segmenter-on-depth"),
    pytest.param("yolo26n-depth.yaml", "semantic", "the dataset is a semantic segmentation dataset", id="depth-on-masks"),
])
def test_a_model_and_dataset_of_different_tasks_name_both(tmp_path, capsys, model, dataset, expect):
    data = synth_dataset(tmp_path / dataset, train=2, val=1, imgsz=32, task=dataset)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "x", "team": "vision", "model": model, "data": str(data),
                                    "epochs": 1, "imgsz": 32, "batch": 2}))
    code = cli.main(["analyse", str(spec)])
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert code == 2 and len(lines) == 1 and expect in lines[0], lines

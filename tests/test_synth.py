"""The synthetic shapes dataset: layout, correct labels, determinism, and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from yoloq import cli
from yoloq.datasets.validate import validate_dataset
from yoloq.datasets.synth import _COLOURS, SHAPES, synth_dataset


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and p.name != "data.yaml"}


def test_layout_and_data_yaml(tmp_path):
    data_yaml = synth_dataset(tmp_path / "ds", train=5, val=3, imgsz=48, nc=4, seed=2)
    root = tmp_path / "ds"
    assert data_yaml == root / "data.yaml"
    data = yaml.safe_load(data_yaml.read_text())
    assert data == {"path": str(root.resolve()), "train": "images/train", "val": "images/val", "nc": 4,
                    "names": list(SHAPES[:4])}
    for split, count in (("train", 5), ("val", 3)):
        images = sorted((root / "images" / split).iterdir())
        labels = sorted((root / "labels" / split).iterdir())
        assert len(images) == len(labels) == count
        assert [p.stem for p in images] == [p.stem for p in labels]
        assert all(Image.open(p).size == (48, 48) for p in images)
    info = validate_dataset(data_yaml)
    assert info.warnings == () and info.splits["train"].boxes >= 5


def test_relative_path_resolves_from_the_yaml_folder(tmp_path):
    data_yaml = synth_dataset(tmp_path / "ds", train=2, val=1, imgsz=32, relative_path=True)
    assert yaml.safe_load(data_yaml.read_text())["path"] == "."
    assert validate_dataset(data_yaml).root == str((tmp_path / "ds").resolve())


def test_deterministic_for_a_seed(tmp_path):
    first = _files(synth_dataset(tmp_path / "a", train=4, val=2, imgsz=32, seed=7).parent)
    again = _files(synth_dataset(tmp_path / "b", train=4, val=2, imgsz=32, seed=7).parent)
    other = _files(synth_dataset(tmp_path / "c", train=4, val=2, imgsz=32, seed=8).parent)
    assert first == again
    assert first != other


def test_labels_match_the_drawn_shapes(tmp_path):
    """Each box's centre holds its class colour, and its edges lie on the shape's extent."""
    data_yaml = synth_dataset(tmp_path / "ds", train=12, val=1, imgsz=64, nc=3, seed=3)
    root = data_yaml.parent
    checked = 0
    for label in sorted((root / "labels" / "train").iterdir()):
        pixels = np.asarray(Image.open(root / "images" / "train" / f"{label.stem}.png").convert("RGB"))
        for row in label.read_text().splitlines():
            cls, cx, cy, w, h = row.split()
            x, y = int(float(cx) * 64), int(float(cy) * 64)
            colour = pixels[min(y, 63), min(x, 63)].astype(int)
            assert np.abs(colour - np.array(_COLOURS[int(cls)])).max() <= 25, (label.name, row)
            x0, x1 = round((float(cx) - float(w) / 2) * 64), round((float(cx) + float(w) / 2) * 64)
            assert 0 <= x0 < x1 <= 64
            checked += 1
    assert checked >= 12


@pytest.mark.parametrize("kwargs", [
    pytest.param({"nc": 0}, id="nc-zero"),
    pytest.param({"nc": len(SHAPES) + 1}, id="nc-too-many"),
    pytest.param({"imgsz": 8}, id="imgsz-tiny"),
    pytest.param({"train": 0}, id="no-train"),
])
def test_rejects_bad_arguments(kwargs, tmp_path):
    with pytest.raises(ValueError):
        synth_dataset(tmp_path / "ds", **{"train": 2, "val": 1, "imgsz": 32, **kwargs})


def test_cli_synth(tmp_path, capsys):
    target = tmp_path / "cli-ds"
    code = cli.main(["dataset", "synth", str(target), "--train", "3", "--val", "2", "--imgsz", "32",
                     "--nc", "5", "--seed", "1"])
    assert code == 0
    assert "wrote 3 train + 2 val images" in capsys.readouterr().out
    assert validate_dataset(target / "data.yaml").names == SHAPES[:5]


def test_cli_synth_bad_nc_is_a_user_error(tmp_path, capsys):
    code = cli.main(["dataset", "synth", str(tmp_path / "x"), "--nc", "99"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: dataset synth: nc must be between 1 and 8")


def _drawn_share(pixels: np.ndarray, polygon: list[tuple[float, float]], cls: int) -> float:
    """The share of the polygon's pixels that hold the class's colour."""
    from PIL import ImageDraw

    mask = Image.new("L", pixels.shape[1::-1])
    ImageDraw.Draw(mask).polygon(polygon, fill=1)
    inside = np.asarray(mask).astype(bool)
    close = np.abs(pixels.astype(int) - np.array(_COLOURS[cls])).max(axis=2) <= 25
    return float(close[inside].mean())


def _rows(root: Path):
    for label in sorted((root / "labels" / "train").iterdir()):
        pixels = np.asarray(Image.open(root / "images" / "train" / f"{label.stem}.png").convert("RGB"))
        for row in label.read_text().splitlines():
            cls, *values = row.split()
            yield pixels, int(cls), [float(v) for v in values]


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_every_task_validates_as_its_own_task_only(task, tmp_path):
    data_yaml = synth_dataset(tmp_path / "ds", train=6, val=2, imgsz=64, seed=1, task=task)
    info = validate_dataset(data_yaml, task=task)
    assert info.warnings == () and info.splits["train"].boxes >= 6
    if task == "pose":
        from yoloq.base.errors import DatasetError

        with pytest.raises(DatasetError, match="kpt_shape"):  # a pose dataset needs a pose model
            validate_dataset(data_yaml, task="detect")


@pytest.mark.parametrize("task", ["segment", "obb"])
def test_polygons_and_rotated_boxes_cover_the_drawn_shape(task, tmp_path):
    """Nine in ten pixels inside each filled shape's polygon (or rotated box, which also holds the
    background at a shape's corners) hold the class colour; a ring is hollow and left out."""
    size, checked = 64, 0
    root = synth_dataset(tmp_path / "ds", train=10, val=1, imgsz=size, nc=5, seed=4, task=task).parent
    for pixels, cls, values in _rows(root):
        polygon = [(values[i] * size, values[i + 1] * size) for i in range(0, len(values), 2)]
        assert len(polygon) == (4 if task == "obb" else len(polygon)) >= 3
        floor = 0.9 if task == "segment" else 0.4  # a rotated triangle fills half its box
        assert _drawn_share(pixels, polygon, cls) >= floor, (cls, values)
        checked += 1
    assert checked >= 10


def test_rotated_boxes_are_rotated_rectangles(tmp_path):
    root = synth_dataset(tmp_path / "ds", train=8, val=1, imgsz=64, seed=2, task="obb").parent
    angles = set()
    for _, _, values in _rows(root):
        corners = np.array(values).reshape(4, 2) * 64
        sides = np.roll(corners, -1, axis=0) - corners
        assert np.allclose([np.dot(sides[i], sides[(i + 1) % 4]) for i in range(4)], 0, atol=0.01), "right angles"
        assert np.allclose(np.linalg.norm(sides[0]), np.linalg.norm(sides[2]), atol=0.01)
        angles.add(round(float(np.degrees(np.arctan2(sides[0][1], sides[0][0]))) % 180 // 30))
    assert len(angles) >= 3, "angles spread over the half turn"


def test_pose_keypoints_are_the_box_corners_and_flip_swaps_left_and_right(tmp_path):
    data_yaml = synth_dataset(tmp_path / "ds", train=4, val=1, imgsz=64, seed=3, task="pose")
    data = yaml.safe_load(data_yaml.read_text())
    assert (data["kpt_shape"], data["flip_idx"]) == ([4, 3], [1, 0, 3, 2])
    for _, _, values in _rows(data_yaml.parent):
        cx, cy, w, h, *kpts = values
        points = np.array(kpts).reshape(4, 3)
        expected = [(cx - w / 2, cy - h / 2), (cx + w / 2, cy - h / 2), (cx + w / 2, cy + h / 2),
                    (cx - w / 2, cy + h / 2)]
        assert np.allclose(points[:, :2], expected, atol=2e-6) and (points[:, 2] == 2).all()
        flipped = points[data["flip_idx"]].copy()  # what ultralytics' horizontal flip does
        flipped[:, 0] = 1 - flipped[:, 0]
        mirrored = [(1 - cx - w / 2, cy - h / 2), (1 - cx + w / 2, cy - h / 2), (1 - cx + w / 2, cy + h / 2),
                    (1 - cx - w / 2, cy + h / 2)]  # the mirrored box's corners, top-left first
        assert np.allclose(flipped[:, :2], mirrored, atol=2e-6)


def test_the_same_seed_draws_the_same_images_for_detect_segment_and_pose(tmp_path):
    images = {task: {k: v for k, v in _files(synth_dataset(tmp_path / task, train=3, val=1, imgsz=32, seed=5,
                                                           task=task).parent).items() if k.startswith("images")}
              for task in ("detect", "segment", "pose")}
    assert images["detect"] == images["segment"] == images["pose"]


def test_cli_synth_task(tmp_path, capsys):
    target = tmp_path / "pose-ds"
    assert cli.main(["dataset", "synth", str(target), "--task", "pose", "--train", "2", "--val", "1"]) == 0
    assert "pose labels" in capsys.readouterr().out
    assert yaml.safe_load((target / "data.yaml").read_text())["kpt_shape"] == [4, 3]
    with pytest.raises(ValueError, match="task must be one of detect, segment, pose, obb, classify, semantic, "
                                         "depth, not 'panoptic'"):
        synth_dataset(tmp_path / "other", task="panoptic")


def test_classify_writes_one_shape_per_image_in_its_class_folder(tmp_path):
    """train/<class>/ and val/<class>/ with every class in both; each image shows its folder's
    shape in its class colour (the drawn colour covers the shape's box centre)."""
    root = synth_dataset(tmp_path / "cls", train=9, val=3, imgsz=48, nc=3, seed=2, task="classify")
    assert root.is_dir() and not (root / "data.yaml").exists()
    for split, per_class in (("train", 3), ("val", 1)):
        assert sorted(p.name for p in (root / split).iterdir()) == sorted(SHAPES[:3])
        for index, name in enumerate(SHAPES[:3]):
            files = sorted((root / split / name).glob("*.png"))
            assert len(files) == per_class
            for file in files:
                pixels = np.asarray(Image.open(file).convert("RGB")).astype(int)
                close = np.abs(pixels - np.array(_COLOURS[index])).max(axis=2) <= 25
                assert close.sum() >= 0.05 * 48 * 48, f"{file} shows its class colour"
    info = validate_dataset(root, task="classify")
    assert info.names == tuple(sorted(SHAPES[:3])) and info.images("train") == 9 and info.images("val") == 3


def test_cli_synth_classify(tmp_path, capsys):
    target = tmp_path / "cls"
    assert cli.main(["dataset", "synth", str(target), "--task", "classify", "--train", "4", "--val", "2",
                     "--nc", "2"]) == 0
    assert "in class folders" in capsys.readouterr().out
    assert sorted(p.name for p in (target / "val").iterdir()) == sorted(SHAPES[:2])


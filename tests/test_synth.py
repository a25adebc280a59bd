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

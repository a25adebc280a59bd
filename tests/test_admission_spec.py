"""Admission beyond the corpus: ultralytics' own tables, weights offline, symlinks, warnings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from yoloq.analysis import analyse, classify
from yoloq.datasets.validate import validate_dataset
from yoloq.analysis.train_args import first_problem
from yoloq.analysis.ultralytics_cfg import tables
from yoloq.base.errors import DatasetError
from yoloq.domain.spec import load_spec, parse_spec
from yoloq.datasets.synth import synth_dataset


def test_tables_read_from_source_equal_ultralytics_own():
    """The tables admission reads without importing ultralytics are the ones its check_cfg uses."""
    import inspect

    from ultralytics import cfg
    from ultralytics.engine.trainer import BaseTrainer

    read = tables()
    assert read.float_keys == cfg.CFG_FLOAT_KEYS and read.fraction_keys == cfg.CFG_FRACTION_KEYS
    assert read.int_keys == cfg.CFG_INT_KEYS and read.bool_keys == cfg.CFG_BOOL_KEYS
    assert read.str_keys == cfg.CFG_STR_KEYS and read.int_min == cfg.CFG_INT_MIN
    assert read.quantize_aliases == cfg.QUANTIZE_ALIASES
    assert read.defaults == dict(cfg.DEFAULT_CFG_DICT)
    source = inspect.getsource(BaseTrainer.build_optimizer)
    assert all(f'"{name}"' in source for name in read.optimizers) and "auto" in read.optimizers


VALID = [{"lr0": 0.001, "optimizer": "AdamW"}, {"optimizer": "sgd"}, {"seed": 3}, {"seed": 3.0},
         {"multi_scale": 0.5}, {"amp": "bf16"}, {"amp": False}, {"cache": "disk"}, {"freeze": 10},
         {"freeze": [0, "23.cv2"]}, {"fraction": 0.5}, {"fraction": 200}, {"fraction": [0.5, 1.0]},
         {"scale": [0.5, 1.5]}, {"compile": "max-autotune"}, {"pretrained": False}, {"classes": 1},
         {"channels_last": None}, {"nbs": 64}, {"warmup_epochs": 0}, {"close_mosaic": 0}]


@pytest.mark.parametrize("args", [pytest.param(a, id=str(a)) for a in VALID])
def test_values_ultralytics_accepts_are_accepted(args):
    assert first_problem(args) is None


@pytest.mark.parametrize("args", [pytest.param(a, id=str(a)) for a in [
    {"lr0": -0.01}, {"nbs": 0}, {"seed": 1.5}, {"momentum": 2}, {"box": "big"}, {"dropout": 1.1},
    {"fraction": 0.0}, {"save_json": "yes"}, {"split": 3}, {"quantize": "int8"}]])
def test_values_ultralytics_refuses_are_refused(args):
    """Each of these raises in ultralytics' own check_cfg(hard=True) (or is refused by yoloq's policy)."""
    from ultralytics.cfg import check_cfg

    assert first_problem(args) is not None
    if "quantize" not in args:
        with pytest.raises((TypeError, ValueError)):
            check_cfg(dict(args), hard=True)


@pytest.fixture()
def dataset(tmp_path) -> Path:
    root = tmp_path / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, seed=0, relative_path=True)
    return root


def _write_spec(where: Path, **fields) -> Path:
    spec = {"name": "j", "team": "t", "model": "yolov8n.yaml", "data": "ds/data.yaml", "epochs": 3,
            "imgsz": 64, "batch": 4, **fields}
    path = where / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _tiny_checkpoint(path: Path) -> Path:
    """A real (untrained) ultralytics detect checkpoint, the shape `yolov8n.pt` has."""
    import torch
    from ultralytics import __version__
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolov8n.yaml", nc=80, verbose=False).half()
    torch.save({"epoch": -1, "model": model, "ema": None, "optimizer": None, "version": __version__,
                "date": "2026-12-01T00:00:00", "train_args": {"model": "yolov8n.yaml", "task": "detect"}}, path)
    return path


def test_weights_dir_resolves_a_bare_name_for_model_and_pretrained(tmp_path, dataset, monkeypatch):
    weights = tmp_path / "weights"
    weights.mkdir()
    _tiny_checkpoint(weights / "yolov8n.pt")
    monkeypatch.setenv("YOLOQ_WEIGHTS_DIR", str(weights))
    spec = load_spec(_write_spec(tmp_path, model="yolov8n.pt"))
    assert spec.model == str(weights / "yolov8n.pt")
    result = analyse(spec)
    assert not result.trains_from_scratch and result.weights == spec.model
    spec = load_spec(_write_spec(tmp_path, train_args={"pretrained": "yolov8n.pt"}))
    assert spec.train_args["pretrained"] == str(weights / "yolov8n.pt")
    assert analyse(spec).weights == str(weights / "yolov8n.pt")


def test_a_file_next_to_the_spec_wins_over_the_weights_dir(tmp_path, dataset, monkeypatch):
    (tmp_path / "weights").mkdir()
    monkeypatch.setenv("YOLOQ_WEIGHTS_DIR", str(tmp_path / "weights"))
    (tmp_path / "yolov8n.pt").write_bytes(b"")
    spec = load_spec(_write_spec(tmp_path, model="yolov8n.pt"))
    assert spec.model == str(tmp_path / "yolov8n.pt")


def test_yaml_model_trains_from_scratch_and_says_so(tmp_path, dataset):
    result = analyse(load_spec(_write_spec(tmp_path)))
    assert result.trains_from_scratch and result.weights == ""
    assert result.to_dict()["trains_from_scratch"] is True


def test_symlinked_image_folders_are_followed(tmp_path):
    """ultralytics' recursive glob follows symlinked folders; so does the analysis."""
    root = tmp_path / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, seed=0)
    elsewhere = tmp_path / "elsewhere"
    (root / "images" / "train").rename(elsewhere)
    (root / "images" / "train").mkdir()
    (root / "images" / "train" / "batch1").symlink_to(elsewhere)
    labels = root / "labels" / "train"
    (labels / "batch1").mkdir()
    for label in labels.glob("*.txt"):
        label.rename(labels / "batch1" / label.name)
    info = validate_dataset(root / "data.yaml")
    assert info.images("train") == 4 and info.splits["train"].labelled == 4


def test_whole_split_folder_as_a_symlink(tmp_path):
    root = tmp_path / "ds"
    synth_dataset(root, train=3, val=2, imgsz=32, seed=0)
    (root / "images" / "val").rename(tmp_path / "val-images")
    (root / "images" / "val").symlink_to(tmp_path / "val-images")
    assert validate_dataset(root / "data.yaml").images("val") == 2


def test_symlink_loop_is_one_line(tmp_path):
    root = tmp_path / "ds"
    synth_dataset(root, train=3, val=2, imgsz=32, seed=0)
    (root / "images" / "train" / "deeper").symlink_to(root / "images")
    with pytest.raises(DatasetError) as caught:
        validate_dataset(root / "data.yaml")
    assert "symlink loop" in caught.value.line() and "\n" not in caught.value.line()


@pytest.mark.parametrize("images, batch, warns", [
    pytest.param(1000, 16, False, id="default-job-1000-images"),
    pytest.param(5000, 8, False, id="default-job-batch-8"),
    pytest.param(64, 16, True, id="tiny-dataset-4-batches"),
    pytest.param(4, 4, True, id="one-batch-per-epoch"),
    pytest.param(1000, 64, False, id="batch-equals-nbs"),
])
def test_accumulation_warning_only_when_material(images, batch, warns):
    exact = classify.exactness({}, batch, images, 100)
    assert (exact.accumulation_warning is not None) is warns
    if warns:
        expected = max(round(64 / batch), 1)
        assert f"every {expected} batches (accumulate = max(round(nbs 64 / batch {batch}), 1))" in \
            exact.accumulation_warning
        assert "nbs:" not in exact.accumulation_warning  # no fix that changes the recipe


def test_lr0_with_optimizer_auto_is_warned(tmp_path, dataset):
    result = analyse(load_spec(_write_spec(tmp_path, train_args={"lr0": 0.001})))
    assert any(w.startswith("train_args.lr0: ignored while optimizer is auto") for w in result.warnings)
    result = analyse(load_spec(_write_spec(tmp_path, train_args={"lr0": 0.001, "optimizer": "AdamW"})))
    assert not any("ignored while optimizer" in w for w in result.warnings)


def test_amp_strings_set_the_memory_estimate(tmp_path, dataset):
    fp32 = analyse(load_spec(_write_spec(tmp_path, train_args={"amp": "fp32"})))
    bf16 = analyse(load_spec(_write_spec(tmp_path, train_args={"amp": "bf16"})))
    assert fp32.amp is False and bf16.amp is True and fp32.est_gpu_mem_gb > bf16.est_gpu_mem_gb


def test_job_too_big_for_every_known_gpu_says_so(tmp_path, dataset):
    result = analyse(load_spec(_write_spec(tmp_path, model="yolo11x.yaml", imgsz=1280, batch=64)),
                     gpu="H200-141GB")
    assert not result.fits
    assert any("fits no GPU type yoloq knows (the largest, H200-141GB, takes at most 51)" in w
               for w in result.warnings)


def test_parse_spec_round_trips_a_dumped_spec(tmp_path, dataset):
    """Flows parse `spec.model_dump()` again: strict types must accept what the spec itself produced."""
    spec = load_spec(_write_spec(tmp_path, segment_epochs=2, train_args={"seed": 1, "lr0": 0.01}))
    assert parse_spec(spec.model_dump()) == spec


def test_weights_missing_everywhere_names_the_env_var(tmp_path, dataset, monkeypatch):
    monkeypatch.delenv("YOLOQ_WEIGHTS_DIR", raising=False)
    from yoloq.base.errors import ModelError

    with pytest.raises(ModelError) as caught:
        analyse(load_spec(_write_spec(tmp_path, model="yolo11n.pt")))
    line = caught.value.line()
    assert "YOLOQ_WEIGHTS_DIR is not set" in line and "nothing is downloaded" in line
    assert os.path.basename(str(tmp_path / "yolo11n.pt")) in line


def test_s3_data_uri_is_not_made_a_local_path(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nteam: t\nmodel: yolov8n.yaml\ndata: s3://bucket/ds/data.yaml\n")
    assert load_spec(path).data == "s3://bucket/ds/data.yaml"

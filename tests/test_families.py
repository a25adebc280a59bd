"""Model families bound to their engine: recognition from model YAMLs and from checkpoint
headers (read without torch), and the refusal line of every family no engine trains,
through the real CLI (`yoloq analyse`, exit 2, one line, no traceback).

Fixtures are built here: YOLOv5 checkpoints by the yolov5 package's own Model class
from its YAMLs, ultralytics checkpoints from ultralytics' model classes (the refused
ones as bare instances: only the header is read), and YOLO-NAS files in the layouts
super-gradients writes (its package is not installed here, so its classes are stand-ins
under its module names). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from yoloq import cli
from yoloq.analysis import analyse
from yoloq.analysis.families import REFUSED_FAMILIES
from yoloq.analysis.fingerprint import fingerprint
from yoloq.analysis.models import engine_of_model, resolve_model_name
from yoloq.base.errors import ModelError
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

YOLOV5_MODELS = Path(importlib.util.find_spec("yolov5").origin).parent / "models"


def _v5(name: str) -> str:
    return str(YOLOV5_MODELS / name)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return synth_dataset(tmp_path_factory.mktemp("families") / "ds", train=4, val=2, imgsz=64, nc=3)


# --- model YAMLs ------------------------------------------------------------------------

@pytest.mark.parametrize("name, family, scale, engine, variant", [
    pytest.param("yolov8n.yaml", "yolov8", "n", "ultralytics", "", id="yolov8n"),
    pytest.param("yolo11s.yaml", "yolo11", "s", "ultralytics", "", id="yolo11s"),
    pytest.param("yolov5s.yaml", "yolov5u", "s", "ultralytics", "", id="bare-yolov5s-is-ultralytics-v5u"),
    pytest.param("yolov5nu.yaml", "yolov5u", "n", "ultralytics", "", id="yolov5nu"),
    pytest.param(_v5("yolov5n.yaml"), "yolov5", "n", "yolov5", "", id="v5-package-n"),
    pytest.param(_v5("yolov5s.yaml"), "yolov5", "s", "yolov5", "", id="v5-package-s"),
    pytest.param(_v5("yolov5x.yaml"), "yolov5", "x", "yolov5", "", id="v5-package-x"),
    pytest.param(_v5("hub/yolov5m6.yaml"), "yolov5", "m", "yolov5", "-p6", id="v5-package-m6"),
])
def test_model_yaml_family_and_engine(name, family, scale, engine, variant):
    info = resolve_model_name(name)
    assert (info.family, info.scale, info.engine, info.variant, info.task) == (family, scale, engine, variant,
                                                                              "detect")
    assert engine_of_model(name) == engine


def test_custom_yolov5_yaml_anywhere_is_original_yolov5(tmp_path):
    """Recognised by content (anchors:), not by name; custom multiples take the nearest scale."""
    cfg = yaml.safe_load(Path(_v5("yolov5s.yaml")).read_text())
    cfg.update(depth_multiple=0.4, width_multiple=0.7)
    path = tmp_path / "my-detector.yaml"
    path.write_text(yaml.safe_dump(cfg))
    info = resolve_model_name(str(path))
    assert (info.family, info.version, info.scale, info.engine) == ("yolov5", "v5", "m", "yolov5")


def test_ultralytics_format_file_is_not_yolov5(tmp_path):
    path = tmp_path / "yolov8n.yaml"
    path.write_text((Path(resolve_model_name("yolov8n.yaml").yaml_path)).read_text())
    assert resolve_model_name(str(path)).family == "yolov8"
    assert engine_of_model(str(path)) == "ultralytics"


def test_incomplete_yolov5_yaml_names_the_missing_keys(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"nc": 3, "anchors": [[10, 13, 16, 30, 33, 23]]}))
    with pytest.raises(ModelError, match="no depth_multiple, width_multiple, backbone, head"):
        resolve_model_name(str(path))


REFUSED_YAMLS = [
    pytest.param("rtdetr-l.yaml", "rtdetr", "grid_sample", id="rtdetr"),
    pytest.param("rtdetr-resnet50.yaml", "rtdetr", "transformer", id="rtdetr-resnet"),
    pytest.param("yolov8s-world.yaml", "yolo-world", "CLIP", id="world"),
    pytest.param("yolov8s-worldv2.yaml", "yolo-world", "CLIP", id="worldv2"),
    pytest.param("yoloe-11s-seg.yaml", "yoloe", "MobileCLIP", id="yoloe"),
    pytest.param("yolo_nas_s.yaml", "super-gradients", "model: yolo_nas_s", id="nas-yaml-name"),
    pytest.param(_v5("segment/yolov5s-seg.yaml"), "segmentation", "trains detection only", id="v5-seg"),
]


@pytest.mark.parametrize("name, what, reason", REFUSED_YAMLS)
def test_refused_yaml_says_why(name, what, reason):
    with pytest.raises(ModelError) as caught:
        resolve_model_name(name)
    line = caught.value.line()
    assert f"is a {what} model" in line and reason in line and "\n" not in line


# --- checkpoint headers -----------------------------------------------------------------

def _yolov5_checkpoint(path: Path, yaml_name: str, resumable: bool) -> Path:
    """A checkpoint in yolov5's own layout (train.py's `ckpt` dict), built by the yolov5 package."""
    import torch
    from yolov5.models.yolo import Model
    from yolov5.utils.torch_utils import smart_optimizer

    model = Model(_v5(yaml_name), ch=3, nc=3)
    model.names = {0: "rectangle", 1: "ellipse", 2: "triangle"}
    optimizer = smart_optimizer(model, "SGD", 0.01, 0.937, 0.0005)
    torch.save({"epoch": 4 if resumable else -1, "best_fitness": 0.1, "model": model.half(),
                "ema": model.half() if resumable else None, "updates": 10,
                "optimizer": optimizer.state_dict() if resumable else None,
                "opt": {"epochs": 30, "imgsz": 64, "batch_size": 8, "cfg": _v5(yaml_name), "seed": 0},
                "date": "2026-12-01T00:00:00", "yolov5pip_version": "7.0.14"}, path)
    return path


def _yolov5_classifier(path: Path) -> Path:
    """yolov5's classifier (ClassificationModel cut from a detection model): it keeps no config."""
    import torch
    from yolov5.models.yolo import ClassificationModel, Model

    model = ClassificationModel(model=Model(_v5("yolov5n.yaml"), ch=3, nc=3), nc=5)
    torch.save({"epoch": -1, "model": model.half(), "ema": None, "optimizer": None, "opt": {}}, path)
    return path


def _ultralytics_checkpoint(path: Path, cls_path: str, yaml_name: str, build: bool) -> Path:
    """An ultralytics checkpoint; `build=False` pickles a bare instance (only the header matters)."""
    import torch

    module, name = cls_path.rsplit(".", 1)
    cls = getattr(__import__(module, fromlist=[name]), name)
    if build:
        model = cls(yaml_name, nc=3, verbose=False).half()
    else:
        model = cls.__new__(cls)
        model.__dict__.update(yaml={"yaml_file": yaml_name, "nc": 3}, names={0: "a", 1: "b", 2: "c"}, nc=3)
    torch.save({"epoch": -1, "model": model, "ema": None, "optimizer": None, "version": "8.4.0",
                "date": "2026-12-01T00:00:00", "train_args": {"model": yaml_name, "epochs": 10, "imgsz": 64}},
               path)
    return path


def _super_gradients_files(directory: Path) -> tuple[Path, Path]:
    """YOLO-NAS as ultralytics' yolo_nas_s.pt holds it (a pickled super-gradients model), and a
    super-gradients training checkpoint ({"net": state_dict, ...})."""
    import torch

    module_name = "super_gradients.training.models.detection_models.yolo_nas.yolo_nas_variants"
    parts = module_name.split(".")
    names = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    modules = {name: types.ModuleType(name) for name in names}
    cls = type("YoloNAS_S", (torch.nn.Module,), {"__module__": module_name})
    modules[module_name].YoloNAS_S = cls
    sys.modules.update(modules)
    try:
        pickled = directory / "yolo_nas_s.pt"
        torch.save(cls(), pickled)
    finally:
        for name in names:
            del sys.modules[name]
    trained = directory / "ckpt_best.pth"
    torch.save({"net": {"backbone.weight": torch.zeros(2)}, "ema_net": None, "epoch": 3, "acc": 0.1}, trained)
    return pickled, trained


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("family-checkpoints")
    nas, nas_training = _super_gradients_files(root)
    return {
        "v5n-resumable": _yolov5_checkpoint(root / "v5n-last.pt", "yolov5n.yaml", resumable=True),
        "v5s-final": _yolov5_checkpoint(root / "v5s-best.pt", "yolov5s.yaml", resumable=False),
        "v5-cls": _yolov5_classifier(root / "v5n-cls.pt"),
        "v5-seg": _yolov5_checkpoint(root / "v5n-seg.pt", "segment/yolov5n-seg.yaml", resumable=False),
        "v5u": _ultralytics_checkpoint(root / "v5nu.pt", "ultralytics.nn.tasks.DetectionModel",
                                       "yolov5nu.yaml", build=True),
        "rtdetr": _ultralytics_checkpoint(root / "rtdetr.pt", "ultralytics.nn.tasks.RTDETRDetectionModel",
                                          "rtdetr-l.yaml", build=False),
        "world": _ultralytics_checkpoint(root / "world.pt", "ultralytics.nn.tasks.WorldModel",
                                         "yolov8s-worldv2.yaml", build=False),
        "yoloe": _ultralytics_checkpoint(root / "yoloe.pt", "ultralytics.nn.tasks.YOLOEModel",
                                         "yoloe-11s.yaml", build=False),
        "nas": nas, "nas-training": nas_training,
    }


@pytest.mark.parametrize("which, family, scale, engine, resumable, epochs_done", [
    pytest.param("v5n-resumable", "yolov5", "n", "yolov5", True, 5, id="yolov5n-resumable"),
    pytest.param("v5s-final", "yolov5", "s", "yolov5", False, 0, id="yolov5s-final"),
    pytest.param("v5u", "yolov5u", "n", "ultralytics", False, 0, id="ultralytics-yolov5nu"),
])
def test_checkpoint_header_family_and_engine(checkpoints, which, family, scale, engine, resumable,
                                             epochs_done):
    found = fingerprint(checkpoints[which])
    assert (found.family, found.scale, found.engine, found.resumable, found.epochs_done, found.task) == \
        (family, scale, engine, resumable, epochs_done, "detect")
    assert found.nc == 3 and engine_of_model(str(checkpoints[which])) == engine
    assert found.to_dict()["engine"] == engine


def test_yolov5_header_fields(checkpoints):
    found = fingerprint(checkpoints["v5n-resumable"])
    assert found.names == ("rectangle", "ellipse", "triangle")
    assert (found.epochs_planned, found.imgsz, found.model_yaml) == (30, 64, "yolov5n.yaml")
    assert found.engine_version == "7.0.14" and found.ultralytics_version == ""
    assert found.model_class == "DetectionModel"


def test_yolov5_header_is_read_without_torch(checkpoints):
    script = ("import sys, json\nfrom yoloq.analysis.fingerprint import fingerprint\n"
              "f = fingerprint(sys.argv[1])\n"
              "print(json.dumps({'family': f.family, 'engine': f.engine, 'torch': 'torch' in sys.modules,"
              " 'yolov5': 'yolov5' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", script, str(checkpoints["v5n-resumable"])],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"family": "yolov5", "engine": "yolov5", "torch": False, "yolov5": False}


def test_header_unpickling_runs_no_code_from_the_file(tmp_path):
    """A yolov5-looking header whose pickle would call os.system stays inert."""
    class Evil:
        def __reduce__(self):
            import os
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    import zipfile
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", pickle.dumps({"model": Evil(), "opt": {}}, protocol=2))
    with pytest.raises(ModelError):
        fingerprint(path)
    assert not (tmp_path / "ran").exists()


# --- refusals through the real CLI --------------------------------------------------------

def _spec(tmp_path: Path, dataset: Path, model: str) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "fam", "team": "vision", "model": model, "data": str(dataset),
                                    "epochs": 3, "imgsz": 64, "batch": 8}))
    return spec


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("model, expect", [
    pytest.param("nas", "super-gradients model, not trained here: a YOLO-NAS file of super-gradients or "
                 "ultralytics is not a yoloq checkpoint", id="nas-pt"),
    pytest.param("nas-training", "super-gradients model, not trained here", id="nas-training-checkpoint"),
    pytest.param("rtdetr", "rtdetr model, not trained here: RT-DETR", id="rtdetr-pt"),
    pytest.param("world", "yolo-world model, not trained here", id="world-pt"),
    pytest.param("yoloe", "yoloe model, not trained here", id="yoloe-pt"),
    pytest.param("v5-seg", "segmentation model of the original YOLOv5, whose engine in yoloq trains "
                 "detection only", id="v5-seg-pt"),
    pytest.param("v5-cls", "classification model of the original YOLOv5", id="v5-cls-pt"),
    pytest.param("rtdetr-l.yaml", "rtdetr model, not trained here", id="rtdetr-yaml"),
    pytest.param("yolov8s-world.yaml", "yolo-world model, not trained here", id="world-yaml"),
    pytest.param("yoloe-11s-seg.yaml", "yoloe model, not trained here", id="yoloe-yaml"),
])
def test_refused_family_one_line_exit_2(model, expect, checkpoints, dataset, tmp_path, capsys):
    model = str(checkpoints.get(model, model))
    code, out, err = _cli(["analyse", str(_spec(tmp_path, dataset, model))], capsys)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model: "), err
    assert expect in lines[0] and "Traceback" not in out + err


@pytest.mark.parametrize("name, scale, params", [("yolo_nas_s", "s", 19.05), ("YOLO_NAS_M", "m", 51.18),
                                                 ("yolo_nas_l", "l", 66.98)])
def test_a_yolonas_architecture_name_is_the_yolonas_engines(name, scale, params):
    from yoloq.analysis.models import engine_of_model

    info = resolve_model_name(name)
    assert (info.family, info.engine, info.scale, info.task, info.params_m) == ("yolo-nas", "yolo-nas", scale,
                                                                                 "detect", params)
    assert engine_of_model(name) == "yolo-nas"


@pytest.mark.parametrize("name", ["yolo_nas_x", "yolo_nas", "yolo-nas-s"])
def test_an_unknown_yolonas_name_is_refused(name):
    with pytest.raises(ModelError):
        resolve_model_name(name)


def test_every_refused_family_has_a_reason():
    assert set(REFUSED_FAMILIES) == {"super-gradients", "rtdetr", "yoloe", "yolo-world"}
    assert all(len(reason) > 40 for reason in REFUSED_FAMILIES.values())


@pytest.mark.parametrize("model, family, engine", [
    pytest.param("v5n-resumable", "yolov5", "yolov5", id="yolov5-checkpoint"),
    pytest.param(_v5("yolov5s.yaml"), "yolov5", "yolov5", id="yolov5-yaml"),
])
def test_analyse_accepts_original_yolov5(model, family, engine, checkpoints, dataset, tmp_path, capsys):
    model = str(checkpoints.get(model, model))
    result = analyse(parse_spec({"name": "v5", "team": "vision", "model": model, "data": str(dataset),
                                 "epochs": 3, "imgsz": 64, "batch": 8}))
    assert (result.family, result.version) == (family, "v5")
    code, out, err = _cli(["analyse", "--json", str(_spec(tmp_path, dataset, model))], capsys)
    assert code == 0, err
    assert json.loads(out)["family"] == "yolov5"


def test_refusal_through_the_installed_command(checkpoints, dataset, tmp_path):
    """The same line from a fresh `python -m yoloq.cli` process: nothing imported beforehand."""
    spec = _spec(tmp_path, dataset, str(checkpoints["rtdetr"]))
    done = subprocess.run([sys.executable, "-m", "yoloq.cli", "analyse", str(spec)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "rtdetr model, not trained here" in done.stderr


@pytest.mark.parametrize("epochs, batch, exact, first_risky", [
    pytest.param(3, 8, True, None, id="inside-warmup-accumulate-1"),
    pytest.param(60, 8, False, 8, id="accumulate-2-from-epoch-8"),
    pytest.param(60, 64, True, None, id="nominal-batch-always-exact"),
])
def test_analyse_applies_yolov5s_exactness_rule(epochs, batch, exact, first_risky, dataset):
    """4 images: one batch per epoch, so yolov5's warmup (100 batches) ramps accumulate over epochs."""
    result = analyse(parse_spec({"name": "v5", "team": "vision", "model": _v5("yolov5n.yaml"),
                                 "data": str(dataset), "epochs": epochs, "imgsz": 64, "batch": batch}))
    assert result.exact_resume is exact
    if first_risky is not None:
        assert f"from epoch {first_risky} and does not save when it last stepped" in result.exact_resume_reason
        assert any(w.startswith("exact_resume: yolov5 accumulates") for w in result.warnings)
    assert not any("ultralytics steps the optimizer" in w for w in result.warnings)

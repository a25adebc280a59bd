"""Read an ultralytics checkpoint's header without torch.

A `.pt` written by `torch.save` is a zip; `<archive>/data.pkl` holds the pickled
checkpoint dict, and tensor data lives in separate zip members that we never
read. We unpickle `data.pkl` with stub classes for everything torch or
ultralytics would build and a placeholder for every tensor storage, so the
header (epoch, optimizer present, train args, model YAML, names) is readable in
milliseconds. Stubs also mean that no code from the file runs: only a short
allow-list of harmless globals resolves to the real thing.

The same header tells the model family, and so the engine that trains it:
ultralytics checkpoints (a model class from `ultralytics.*`), original YOLOv5
ones (a `models.yolo` class from the yolov5 repository or pip package, whose
config has `anchors:`), and the refused families: RT-DETR, YOLOE and YOLO-World
(by ultralytics model class) and YOLO-NAS (a pickled super-gradients model, or a
super-gradients training checkpoint with its `net` state).
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from yoloq.analysis.families import (
    VERSIONS,
    YOLO_NAS,
    YOLOV5,
    engine_for,
    is_yolov5_cfg,
    parse_model_name,
    refuse_family,
    refused_family_of_name,
    task_of_yaml,
    yolov5_scale,
    yolov5_task,
)
from yoloq.base.errors import ModelError

_SAFE_GLOBALS = {
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("builtins", "set"),
    ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"), ("builtins", "bytearray"),
    ("builtins", "range"), ("builtins", "tuple"), ("builtins", "list"), ("builtins", "dict"),
    ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "Path"),
    ("datetime", "datetime"), ("datetime", "timedelta"), ("datetime", "timezone"), ("datetime", "date"),
}
_MODEL_TASKS = {"DetectionModel": "detect", "SegmentationModel": "segment", "PoseModel": "pose",
                "OBBModel": "obb", "ClassificationModel": "classify", "RTDETRDetectionModel": "rtdetr",
                "WorldModel": "world", "YOLOEModel": "yoloe", "YOLOESegModel": "yoloe-segment"}
# yolov5's model classes for the tasks its engine does not train (a classifier keeps no config).
_V5_CLASS_TASKS = {"SegmentationModel": "segment", "ClassificationModel": "classify"}
# ultralytics model classes of the refused families (models.REFUSED_FAMILIES holds the reasons).
_CLASS_FAMILIES = {"RTDETRDetectionModel": "rtdetr", "WorldModel": "yolo-world", "YOLOEModel": "yoloe",
                   "YOLOESegModel": "yoloe"}


class Stub:
    """Stands in for any class or function the checkpoint names; keeps what it is given."""

    _module = "?"
    _qualname = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}  # (dict state, slot state)
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self._state = state

    def __getitem__(self, key: Any) -> Any:  # IterableSimpleNamespace read like a dict
        return self.__dict__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__.get(key, default)


class StoragePlaceholder:
    """Stands in for a tensor storage (its bytes stay in the zip)."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


class _HeaderUnpickler(pickle.Unpickler):
    _stubs: ClassVar[dict[tuple[str, str], type]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        key = (module, name)
        if key not in self._stubs:
            self._stubs[key] = type(name, (Stub,), {"_module": module, "_qualname": name})
        return self._stubs[key]

    def persistent_load(self, pid: Any) -> StoragePlaceholder:
        return StoragePlaceholder(pid)


@dataclass(frozen=True)
class Fingerprint:
    """What a checkpoint is, read from its header."""

    path: str
    family: str  # yolov8, yolo11, ... ("" if the model YAML name is not a YOLO family)
    version: str  # v8, 11, v5u, ...
    scale: str
    task: str
    nc: int
    names: tuple[str, ...]
    model_yaml: str  # the model YAML name the weights were built from
    resumable: bool  # optimizer state present and epoch >= 0 (a `last.pt` mid-training)
    epoch: int  # ultralytics' saved epoch index (-1 once stripped)
    epochs_done: int
    epochs_planned: int
    imgsz: int | None
    ultralytics_version: str  # "" for original YOLOv5 checkpoints (see engine_version)
    date: str
    model_class: str
    engine_version: str = ""  # the version of the package that wrote it (ultralytics or yolov5)

    @property
    def kind(self) -> str:
        """"resumable" (optimizer kept), "final" (its last planned epoch trained) or "weights"
        (stripped before its last epoch: it fine-tunes, but it is not the end of a training)."""
        if self.resumable:
            return "resumable"
        return "final" if not self.epochs_planned or self.epochs_done >= self.epochs_planned else "weights"

    @property
    def label(self) -> str:
        """What it is, for people: a stripped mid-training checkpoint is never called final."""
        of = f" of {self.epochs_planned}" if self.epochs_planned else ""
        if self.kind == "resumable":
            return f"resumable checkpoint at epoch {self.epochs_done}{of}"
        if self.kind == "final":
            return f"final checkpoint ({self.epochs_done} epochs)"
        return f"checkpoint at epoch {self.epochs_done}{of} (weights only, not resumable)"

    @property
    def engine(self) -> str:
        """The engine that trains this family: "ultralytics", "yolov5" or "yolo-nas"."""
        return engine_for(self.family)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "names": list(self.names), "kind": self.kind, "label": self.label,
                "engine": self.engine}


def read_header(path: str | Path, field: str = "model") -> dict[str, Any]:
    """Unpickle `*/data.pkl` of a torch zip checkpoint with stubs; raise ModelError if not one."""
    header = _load_header(path, field)
    if is_yolonas_header(header):
        return header
    refuse_family(field, str(path), _foreign_family(header))
    if not isinstance(header, dict) or not ({"model", "ema"} & header.keys()):
        raise ModelError(field, f"{Path(path).name} is not a YOLO checkpoint (no model in it)",
                         "give a .pt written by ultralytics or yolov5 training")
    return header


def _load_header(path: str | Path, field: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ModelError(field, f"checkpoint not found: {path}", "give the path to an existing .pt file")
    if not zipfile.is_zipfile(path):
        raise ModelError(field, f"{path.name} is not a torch zip checkpoint",
                         "give a .pt written by ultralytics or yolov5 (torch.save zip format)")
    try:
        with zipfile.ZipFile(path) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if member is None:
                raise ModelError(field, f"{path.name} has no data.pkl inside",
                                 "give a .pt written by ultralytics or yolov5")
            return _HeaderUnpickler(archive.open(member)).load()
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001  (corrupt zip or pickle: one line, no traceback)
        raise ModelError(field, f"{path.name} could not be read ({type(exc).__name__}: {exc})",
                         "give an intact .pt written by ultralytics or yolov5") from None


def _foreign_family(header: Any) -> str:
    """"super-gradients" for its files (a pickled model, or a training checkpoint), else ""."""
    if isinstance(header, Stub) and header._module.startswith("super_gradients"):
        return "super-gradients"
    if isinstance(header, dict) and "net" in header and not ({"model", "ema"} & header.keys()):
        return "super-gradients"  # its Trainer saves {"net": state_dict, "ema_net", ...}
    return ""


def is_yolonas_header(header: Any) -> bool:
    """A checkpoint of yoloq's YOLO-NAS engine (`yoloq/engine/yolonas/runner.py`): plain
    state_dicts and a `yoloq` marker naming the engine."""
    marker = header.get("yoloq") if isinstance(header, dict) else None
    return isinstance(marker, dict) and marker.get("engine") == YOLO_NAS


def _yolonas_fingerprint(path: str | Path, header: dict[str, Any]) -> Fingerprint:
    marker, hyp = header["yoloq"], _as_dict(header.get("hyp"))
    arch = str(marker.get("arch") or hyp.get("arch") or "")
    names = _names(header.get("names"))
    done = int(header.get("epoch") or 0)  # the runner counts epochs done (1-based)
    return Fingerprint(
        path=str(Path(path).resolve()), family=YOLO_NAS, version=VERSIONS[YOLO_NAS],
        scale=arch.rsplit("_", 1)[-1], task="detect", nc=len(names), names=names, model_yaml=arch,
        resumable=bool(marker.get("resumable")), epoch=done - 1, epochs_done=done,
        epochs_planned=int(header.get("epochs") or hyp.get("epochs") or 0),
        imgsz=_int_or_none(hyp.get("imgsz")), ultralytics_version="", date=str(marker.get("date") or ""),
        model_class=arch, engine_version=str(marker.get("super_gradients") or ""),
    )


def fingerprint(path: str | Path, field: str = "model") -> Fingerprint:
    """Fingerprint a checkpoint: family, scale, task, classes, resumable or final, epochs."""
    header = read_header(path, field)
    if is_yolonas_header(header):
        return _yolonas_fingerprint(path, header)
    model = header.get("ema") or header.get("model")
    if isinstance(model, Stub) and _is_yolov5_model(model):
        return _yolov5_fingerprint(path, header, model)
    if not isinstance(model, Stub) or not model._module.startswith("ultralytics."):
        raise ModelError(field, f"{Path(path).name} holds no model object",
                         "give a .pt written by ultralytics or yolov5 training")
    train_args = _as_dict(header.get("train_args"))
    cfg = _as_dict(getattr(model, "yaml", None))
    model_yaml = str(cfg.get("yaml_file") or train_args.get("model") or "")
    family, scale, _variant = parse_model_name(model_yaml) or ("", "", "")
    family = _CLASS_FAMILIES.get(type(model).__name__) or refused_family_of_name(model_yaml) or family
    scale = str(cfg.get("scale") or scale)
    names = _names(getattr(model, "names", None))
    epoch = int(header.get("epoch", -1) if header.get("epoch") is not None else -1)
    resumable = header.get("optimizer") is not None and epoch >= 0
    return Fingerprint(
        path=str(Path(path).resolve()), family=family,
        version=_version(family), scale=scale, task=_task(model, train_args, cfg),
        nc=int(getattr(model, "nc", None) or cfg.get("nc") or len(names)), names=names,
        model_yaml=Path(model_yaml).name, resumable=resumable, epoch=epoch,
        epochs_done=_epochs_done(header, epoch, resumable), epochs_planned=int(train_args.get("epochs") or 0),
        imgsz=_int_or_none(train_args.get("imgsz")),
        ultralytics_version=str(header.get("version") or ""), date=str(header.get("date") or ""),
        model_class=type(model).__name__, engine_version=str(header.get("version") or ""),
    )


def _is_yolov5_model(model: Stub) -> bool:
    """A model class of the yolov5 repository (`models.yolo`) or package (`yolov5.models.yolo`),
    or any non-ultralytics model whose config has anchors."""
    if model._module.startswith("ultralytics."):
        return False
    return model._module.endswith("models.yolo") or is_yolov5_cfg(_as_dict(getattr(model, "yaml", None)))


def _yolov5_fingerprint(path: str | Path, header: dict[str, Any], model: Stub) -> Fingerprint:
    """An original YOLOv5 checkpoint: yolov5's `opt` holds the train arguments."""
    cfg = _as_dict(getattr(model, "yaml", None))
    opt = _as_dict(header.get("opt"))
    names = _names(getattr(model, "names", None))
    epoch = int(header.get("epoch") if header.get("epoch") is not None else -1)
    resumable = header.get("optimizer") is not None and epoch >= 0
    model_yaml = str(getattr(model, "yaml_file", "") or opt.get("cfg") or "")
    imgsz = opt.get("imgsz")
    return Fingerprint(
        path=str(Path(path).resolve()), family=YOLOV5, version=VERSIONS[YOLOV5], scale=yolov5_scale(cfg),
        task=_V5_CLASS_TASKS.get(type(model).__name__) or yolov5_task(cfg),
        nc=int(getattr(model, "nc", None) or cfg.get("nc") or len(names)), names=names,
        model_yaml=Path(model_yaml).name, resumable=resumable, epoch=epoch,
        epochs_done=_epochs_done(header, epoch, resumable), epochs_planned=int(opt.get("epochs") or 0),
        imgsz=_int_or_none(imgsz[0] if isinstance(imgsz, (list, tuple)) and imgsz else imgsz),
        ultralytics_version="", date=str(header.get("date") or ""), model_class=type(model).__name__,
        engine_version=str(header.get("yolov5pip_version") or _as_dict(header.get("git")).get("commit") or ""),
    )


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, Stub):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return {}


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, dict):
        return tuple(str(value[k]) for k in sorted(value))
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()


def _task(model: Stub, train_args: dict[str, Any], cfg: dict[str, Any]) -> str:
    by_class = _MODEL_TASKS.get(type(model).__name__)
    if by_class and by_class != "detect":
        return by_class
    args = _as_dict(getattr(model, "args", None))
    task = args.get("task") or train_args.get("task")
    if task:
        return str(task)
    return task_of_yaml(cfg) if cfg else (by_class or "unknown")


def _epochs_done(header: dict[str, Any], epoch: int, resumable: bool) -> int:
    if resumable:
        return epoch + 1
    results = header.get("train_results")
    if isinstance(results, dict) and isinstance(results.get("epoch"), list) and results["epoch"]:
        return int(max(results["epoch"]))
    return max(epoch + 1, 0)


def _version(family: str) -> str:
    return VERSIONS.get(family, family.removeprefix("yolo").lstrip("-"))


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

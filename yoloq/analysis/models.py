"""Model names: which YOLO YAMLs exist, their family, scale, task and size.

Model YAMLs are looked up among the files that ship inside the installed
ultralytics package (`ultralytics/cfg/models/**.yaml`), found with
`importlib.util.find_spec` so ultralytics (and torch) is never imported. Name
resolution follows ultralytics' own `yaml_model_load`: `yolov8n.yaml` is
`yolov8.yaml` at scale `n`; `yolov5nu.yaml` is `yolov5n.yaml`.

Each family is bound to the engine that trains it (`engine_for`): ultralytics'
families to the ultralytics engine; original YOLOv5 (a YAML file in the
ultralytics/yolov5 repository format, recognised by its `anchors:`) to the
`yolov5` engine. Families no engine can train here are recognised by name and
refused with the reason (`REFUSED_FAMILIES`). The name-only part (family tables,
name grammar, refusals) lives in `families`, below both this module and `fingerprint`.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from yoloq.analysis.families import (  # the lower layer, shared with fingerprint
    MODEL_SIZES,
    NAS_NAME,
    SUPPORTED_FAMILIES,
    ULTRALYTICS,
    VERSIONS,
    YOLO_NAS,
    YOLOV5,
    engine_for,
    parse_model_name,
    refuse_family,
    refused_family_of_name,
    task_of_yaml,
    yolov5_scale,
    yolov5_task,
)
from yoloq.analysis.fingerprint import fingerprint, read_header
from yoloq.base.errors import ModelError

# Tasks the engines do not train (see docs/concepts/model-families.md).
_V5_KEYS = ("nc", "depth_multiple", "width_multiple", "anchors", "backbone", "head")
_DETECT_HEADS = {"detect", "v10detect"}


@dataclass(frozen=True)
class ModelInfo:
    """What a model name (or a checkpoint's model YAML name) stands for."""

    name: str
    family: str  # yolov8, yolo11, yolov5u (ultralytics), yolov5 (original, anchor-based), ...
    version: str  # v8, 11, v5u, ... (ultralytics' short name)
    scale: str  # n, s, m, l, x (t, c, e for v9; b for v10)
    task: str  # detect, segment, pose, obb, classify, ...
    variant: str  # "" or e.g. "-p2", "-p6", "-ghost"
    params_m: float
    gflops: float
    yaml_path: str  # the shipped YAML this name resolves to ("" when unknown)

    @property
    def engine(self) -> str:
        return engine_for(self.family)


@functools.lru_cache(maxsize=1)
def shipped_model_yamls() -> dict[str, Path]:
    """Stem -> path of every model YAML shipped with the installed ultralytics."""
    found = importlib.util.find_spec("ultralytics")
    if found is None or not found.submodule_search_locations:
        return {}
    root = Path(next(iter(found.submodule_search_locations))) / "cfg" / "models"
    return {p.stem: p for p in sorted(root.rglob("*.yaml"))}


@functools.lru_cache(maxsize=64)
def _read_model_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def resolve_model_name(name: str, field: str = "model") -> ModelInfo:
    """Check a model YAML name against the shipped YAMLs; raise ModelError when unusable.

    A path to an existing YAML in the yolov5 repository format (with `anchors:`) is
    original YOLOv5; every other name resolves among ultralytics' shipped YAMLs.
    """
    nas = NAS_NAME.match(name.strip().lower())
    if nas:
        return yolonas_info(name, nas["scale"])
    if not name.lower().endswith((".yaml", ".yml")):
        if name.lower().endswith(".pth") and Path(name).is_file():  # super-gradients' suffix
            read_header(name, field)  # a YOLO-NAS (super-gradients) checkpoint is refused with why
        raise ModelError(field, f"{name!r} is neither a model YAML name nor a .pt file",
                         "use a name like yolov8n.yaml or yolo11s.yaml, or the path to a .pt checkpoint")
    refuse_family(field, name, refused_family_of_name(name))
    v5 = yolov5_yaml(name, field)
    if v5 is not None:
        return v5
    parsed = parse_model_name(name)
    path = _find_yaml(name, parsed)
    if parsed is None or path is None:
        raise ModelError(field, f"unknown model YAML {name!r}",
                         f"use a shipped model such as yolov8n.yaml or yolo11s.yaml, or the path to an "
                         f"original YOLOv5 YAML; families: {', '.join(SUPPORTED_FAMILIES)}")
    family, scale, variant = parsed
    cfg = _read_model_yaml(path)
    scale = _check_scale(name, field, scale, cfg)
    task = task_of_yaml(cfg)
    check_supported(field, name, family, task, str(cfg["head"][-1][-2]) if task == "detect" else "")
    params_m, gflops = model_size(family, scale)
    return ModelInfo(name=Path(name).name, family=family, version=VERSIONS[family], scale=scale, task=task,
                     variant=variant, params_m=params_m, gflops=gflops, yaml_path=str(path))


def yolonas_info(name: str, scale: str) -> ModelInfo:
    """A YOLO-NAS architecture name (`yolo_nas_s`): built by super-gradients, no file."""
    params_m, gflops = model_size(YOLO_NAS, scale)
    return ModelInfo(name=name.strip().lower(), family=YOLO_NAS, version=VERSIONS[YOLO_NAS], scale=scale,
                     task="detect", variant="", params_m=params_m, gflops=gflops, yaml_path="")


def engine_of_model(model: str) -> str:
    """The engine for a spec's `model` (a name, a YAML or a .pt): "yolo-nas" for a YOLO-NAS
    architecture name or checkpoint, "yolov5" when recognised as original YOLOv5; anything
    else goes to ultralytics, which reports its own errors."""
    if NAS_NAME.match(str(model).strip().lower()):
        return YOLO_NAS
    if str(model).lower().endswith(".pt"):
        try:
            return fingerprint(model).engine
        except ModelError:
            return ULTRALYTICS
    try:
        return YOLOV5 if yolov5_yaml(str(model)) is not None else ULTRALYTICS
    except ModelError:
        return YOLOV5  # an anchors YAML with a problem: the yolov5 engine says which


def yolov5_yaml(name: str, field: str = "model") -> ModelInfo | None:
    """ModelInfo for a YAML file in the original YOLOv5 format; None for any other name."""
    path = Path(name).expanduser()
    if not path.is_file():
        return None
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ModelError(field, f"cannot read model YAML {path}: {type(exc).__name__}",
                         "give a readable YAML model file") from None
    if not isinstance(cfg, dict) or "anchors" not in cfg:
        return None  # ultralytics format: resolved by name as before
    missing = [key for key in _V5_KEYS if key not in cfg]
    if missing:
        raise ModelError(field, f"{path.name} has `anchors:` (YOLOv5 format) but no {', '.join(missing)}",
                         "give a complete YOLOv5 model YAML such as the yolov5 package's models/yolov5s.yaml")
    return yolov5_info(path.name, cfg, field, yaml_path=str(path.resolve()))


def yolov5_info(name: str, cfg: dict[str, Any], field: str = "model", yaml_path: str = "") -> ModelInfo:
    """ModelInfo for an original YOLOv5 model config (from a YAML file or a checkpoint header)."""
    task = yolov5_task(cfg)
    check_supported(field, name, YOLOV5, task, "")
    scale = yolov5_scale(cfg)
    variant = ("-p6" if len(cfg.get("anchors") or ()) == 4 else "")
    params_m, gflops = model_size(YOLOV5, scale)
    return ModelInfo(name=Path(name).name, family=YOLOV5, version=VERSIONS[YOLOV5], scale=scale, task=task,
                     variant=variant, params_m=params_m, gflops=gflops, yaml_path=yaml_path)


def _find_yaml(name: str, parsed: tuple[str, str, str] | None) -> Path | None:
    shipped = shipped_model_yamls()
    stem = Path(name).name.rsplit(".", 1)[0]
    stem = re.sub(r"^(yolov[35].*)u$", r"\1", stem)  # yolov5nu -> yolov5n (ultralytics does the same)
    stem = re.sub(r"^(yolov[58][nsmlx])6(.*)$", r"\1-p6\2", stem)  # yolov5n6 -> yolov5n-p6
    unified = re.sub(r"(\d+)([nslmx])(.+)?$", r"\1\3", stem)  # yolov8n-p2 -> yolov8-p2
    return shipped.get(stem) or shipped.get(unified)


def _check_scale(name: str, field: str, scale: str, cfg: dict[str, Any]) -> str:
    scales = list((cfg.get("scales") or {}).keys())
    if scales and scale not in scales:
        if not scale:
            return scales[0]  # ultralytics warns and uses the first scale
        raise ModelError(field, f"{name!r} has no scale {scale!r}",
                         f"use one of the scales {', '.join(scales)}")
    return scale


def check_supported(field: str, name: str, family: str, task: str, head: str) -> None:
    """Raise ModelError unless this is a model of a task and family yoloq can train and estimate."""
    from yoloq.domain.tasks import TRAINED_TASKS, task as task_row

    refuse_family(field, name, family)
    row = task_row(task)
    if family == YOLOV5 and task != "detect":  # the yolov5 engine runs yolov5's detection train.py only
        raise ModelError(field, f"{name!r} is a {row.label} model of the original YOLOv5, whose engine in "
                         "yoloq trains detection only (docs/concepts/tasks.md)",
                         f"use an ultralytics model such as {row.example if not row.refused else 'yolov8n.yaml'}")
    if row.refused:
        raise ModelError(field, f"{name!r} is a {row.label} model, not trained by yoloq yet: {row.refused} "
                         "(docs/concepts/tasks.md)",
                         f"use a model of a task yoloq trains ({', '.join(TRAINED_TASKS)}), e.g. yolov8n-seg.yaml")
    if family not in MODEL_SIZES:
        raise ModelError(field, f"{name!r} is a {family} model, which yoloq does not support",
                         f"use one of the families {', '.join(SUPPORTED_FAMILIES)}")
    if head and head.lower() not in _DETECT_HEADS:
        raise ModelError(field, f"{name!r} has a {head} head (open-vocabulary or transformer), not supported",
                         "use a plain detect model such as yolov8n.yaml")


YOLOV5_NBS = 64  # yolov5's nominal batch size (hard-coded in its train.py)
YOLOV5_MIN_WARMUP_ITERATIONS = 100  # train.py: nw = max(round(warmup_epochs * nb), 100)
YOLOV5_WARMUP_EPOCHS = 3.0  # hyp.scratch-low.yaml


def yolov5_accumulate_at(epoch: int, batch: int, batches_per_epoch: int, warmup_epochs: float) -> int:
    """yolov5's `accumulate` at the first batch of 0-based `epoch` (train.py's warmup ramp)."""
    ni = epoch * batches_per_epoch
    nw = max(round(warmup_epochs * batches_per_epoch), YOLOV5_MIN_WARMUP_ITERATIONS)
    if ni <= nw:
        ramp = 1 + (YOLOV5_NBS / batch - 1) * ni / nw  # np.interp(ni, [0, nw], [1, nbs / batch])
        return int(max(1, round(ramp)))  # round half to even, as numpy's .round()
    return max(round(YOLOV5_NBS / batch), 1)


def yolov5_exactness(train_args: dict[str, Any], batch: int, train_images: int, epochs: int) -> Any:
    """classify.Exactness for the yolov5 engine: a boundary is exact where `accumulate` is 1.

    yolov5 keeps the batch index of its last optimizer step in a local that no checkpoint
    holds, so a resumed loop steps after its first batch; an uninterrupted one may wait.
    """
    from yoloq.analysis.classify import Exactness

    batches = max(1, -(-train_images // batch))
    warmup = float(train_args.get("warmup_epochs", YOLOV5_WARMUP_EPOCHS))
    risky = tuple(e for e in range(1, epochs) if yolov5_accumulate_at(e, batch, batches, warmup) > 1)
    accumulate = max(round(YOLOV5_NBS / batch), 1)
    reason = None
    if risky:
        reason = (f"yolov5 accumulates {yolov5_accumulate_at(risky[0], batch, batches, warmup)} or more "
                  f"batches per optimizer step from epoch {risky[0]} and does not save when it last "
                  f"stepped, so a resume at those boundaries may differ (fix: batch >= 43 keeps every "
                  f"boundary exact)")
    return Exactness(not risky, reason, accumulate, batches, risky, None)


def yolonas_exactness(train_args: dict[str, Any], batch: int, train_images: int, epochs: int) -> Any:
    """classify.Exactness for the YOLO-NAS engine: it steps the optimizer every batch (no
    accumulation) and saves every RNG stream, so each boundary is exact when deterministic."""
    from yoloq.analysis.classify import Exactness

    batches = max(1, -(-train_images // batch))
    if train_args.get("deterministic", True) is False:
        return Exactness(False, "train_args.deterministic is false: kernels may differ after a resume "
                         "(fix: remove it or set it to true)", 1, batches, (), None)
    return Exactness(True, None, 1, batches, (), None)


def model_size(family: str, scale: str) -> tuple[float, float]:
    """(params in millions, GFLOPs at 640) for a family and scale; the nearest scale if unlisted."""
    sizes = MODEL_SIZES[family]
    return sizes.get(scale) or sizes.get("n") or next(iter(sizes.values()))

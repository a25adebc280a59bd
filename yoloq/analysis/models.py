"""Model names: which YOLO YAMLs exist, their family, scale, task and size.

Model YAMLs are looked up among the files that ship inside the installed
ultralytics package (`ultralytics/cfg/models/**.yaml`), found with
`importlib.util.find_spec` so ultralytics (and torch) is never imported. Name
resolution follows ultralytics' own `yaml_model_load`: `yolov8n.yaml` is
`yolov8.yaml` at scale `n`; `yolov5nu.yaml` is `yolov5n.yaml`.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from yoloq.errors import ModelError

# Published sizes at 640 px, 80 classes: (parameters in millions, GFLOPs).
# v8, v9, 11, 12, 26: the summaries printed in the shipped model YAMLs (ultralytics 8.4).
# v5u and v10: the tables on docs.ultralytics.com/models/yolov5 and /models/yolov10.
MODEL_SIZES: dict[str, dict[str, tuple[float, float]]] = {
    "yolov5u": {"n": (2.6, 7.7), "s": (9.1, 24.0), "m": (25.1, 64.2), "l": (53.2, 135.0), "x": (97.2, 246.4)},
    "yolov8": {"n": (3.16, 8.9), "s": (11.17, 28.8), "m": (25.90, 79.3), "l": (43.69, 165.7),
               "x": (68.23, 258.5)},
    "yolov9": {"t": (2.13, 8.5), "s": (7.32, 27.6), "m": (20.22, 77.9), "c": (25.59, 104.0),
               "e": (58.21, 193.0)},
    "yolov10": {"n": (2.3, 6.7), "s": (7.2, 21.6), "m": (15.4, 59.1), "b": (19.1, 92.0), "l": (24.4, 120.3),
                "x": (29.5, 160.4)},
    "yolo11": {"n": (2.62, 6.6), "s": (9.46, 21.7), "m": (20.11, 68.5), "l": (25.37, 87.6), "x": (56.97, 196.0)},
    "yolo12": {"n": (2.60, 6.7), "s": (9.28, 21.7), "m": (20.20, 68.1), "l": (26.45, 89.7), "x": (59.21, 200.3)},
    "yolo26": {"n": (2.57, 6.1), "s": (10.01, 22.8), "m": (21.90, 75.4), "l": (26.30, 93.8), "x": (58.99, 209.5)},
}
SUPPORTED_FAMILIES = tuple(MODEL_SIZES)
# ultralytics' own short names for the families (as in its docs and model YAML folders).
VERSIONS = {"yolov5u": "v5u", "yolov8": "v8", "yolov9": "v9", "yolov10": "v10",
            "yolo11": "11", "yolo12": "12", "yolo26": "26"}
_DETECT_HEADS = {"detect", "v10detect"}
_NAME = re.compile(r"^yolo(?P<v>v?)(?P<num>\d+)(?P<scale>[nsmlxtcbe])?(?P<p6>6)?(?P<u>u)?"
                   r"(?P<variant>-[a-z0-9-]+)?$")


@dataclass(frozen=True)
class ModelInfo:
    """What a model name (or a checkpoint's model YAML name) stands for."""

    name: str
    family: str  # yolov8, yolo11, yolov5u, ...
    version: str  # v8, 11, v5u, ... (ultralytics' short name)
    scale: str  # n, s, m, l, x (t, c, e for v9; b for v10)
    task: str  # detect, segment, pose, obb, classify, ...
    variant: str  # "" or e.g. "-p2", "-p6", "-ghost"
    params_m: float
    gflops: float
    yaml_path: str  # the shipped YAML this name resolves to ("" when unknown)


@functools.lru_cache(maxsize=1)
def shipped_model_yamls() -> dict[str, Path]:
    """Stem -> path of every model YAML shipped with the installed ultralytics."""
    found = importlib.util.find_spec("ultralytics")
    if found is None or not found.submodule_search_locations:
        return {}
    root = Path(list(found.submodule_search_locations)[0]) / "cfg" / "models"
    return {p.stem: p for p in sorted(root.rglob("*.yaml"))}


@functools.lru_cache(maxsize=64)
def _read_model_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def parse_model_name(name: str) -> tuple[str, str, str] | None:
    """`yolov8n-p2.yaml` -> ("yolov8", "n", "-p2"); None when it is no YOLO family name."""
    stem = Path(name).name.lower().removesuffix(".yaml").removesuffix(".yml").removesuffix(".pt")
    match = _NAME.match(stem)
    if not match:
        return None
    family = f"yolo{match['v']}{match['num']}" + ("u" if match["v"] and match["num"] in ("3", "5") else "")
    variant = ("-p6" if match["p6"] else "") + (match["variant"] or "")
    return family, match["scale"] or "", variant


def task_of_yaml(cfg: dict[str, Any]) -> str:
    """The task of a model YAML from its output module, as ultralytics' guess_model_task does."""
    try:
        module = str(cfg["head"][-1][-2]).lower()
    except (KeyError, IndexError, TypeError):
        return "unknown"
    if module in {"classify", "classifier", "cls", "fc"}:
        return "classify"
    for task, marker in (("detect", "detect"), ("semantic", "semanticsegment"), ("segment", "segment"),
                         ("pose", "pose"), ("obb", "obb"), ("depth", "depth")):
        if marker in module:
            return task
    return "unknown"


def resolve_model_name(name: str, field: str = "model") -> ModelInfo:
    """Check a model YAML name against the shipped YAMLs; raise ModelError when unusable."""
    if not name.lower().endswith((".yaml", ".yml")):
        raise ModelError(field, f"{name!r} is neither a model YAML name nor a .pt file",
                         "use a name like yolov8n.yaml or yolo11s.yaml, or the path to a .pt checkpoint")
    parsed = parse_model_name(name)
    path = _find_yaml(name, parsed)
    if parsed is None or path is None:
        raise ModelError(field, f"unknown model YAML {name!r}",
                         f"use a shipped model such as yolov8n.yaml or yolo11s.yaml; families: "
                         f"{', '.join(SUPPORTED_FAMILIES)}")
    family, scale, variant = parsed
    cfg = _read_model_yaml(path)
    scale = _check_scale(name, field, scale, cfg)
    task = task_of_yaml(cfg)
    check_supported(field, name, family, task, str(cfg["head"][-1][-2]) if task == "detect" else "")
    params_m, gflops = model_size(family, scale)
    return ModelInfo(name=Path(name).name, family=family, version=VERSIONS[family], scale=scale, task=task,
                     variant=variant, params_m=params_m, gflops=gflops, yaml_path=str(path))


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
    """Raise ModelError unless this is a detect model of a family yoloq can estimate."""
    if task != "detect":
        raise ModelError(field, f"{name!r} is a {task} model; yoloq trains detect models only",
                         "use a detect model such as yolov8n.yaml or yolo11n.yaml")
    if family not in MODEL_SIZES:
        raise ModelError(field, f"{name!r} is a {family} model, which yoloq does not support",
                         f"use one of the families {', '.join(SUPPORTED_FAMILIES)}")
    if head and head.lower() not in _DETECT_HEADS:
        raise ModelError(field, f"{name!r} has a {head} head (open-vocabulary or transformer), not supported",
                         "use a plain detect model such as yolov8n.yaml")


def model_size(family: str, scale: str) -> tuple[float, float]:
    """(params in millions, GFLOPs at 640) for a family and scale; the nearest scale if unlisted."""
    sizes = MODEL_SIZES[family]
    return sizes.get(scale) or sizes.get("n") or next(iter(sizes.values()))

"""Model families by name: sizes, short versions, engines and the refused families.

The lowest layer of model naming, read by both `models` (YAML names) and `fingerprint`
(checkpoint headers), so neither imports the other back: no torch, no ultralytics, no
file reading.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from yoloq.base.errors import ModelError

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
# Original YOLOv5 v7.0 (anchor-based): the README table of github.com/ultralytics/yolov5.
MODEL_SIZES["yolov5"] = {"n": (1.9, 4.5), "s": (7.2, 16.5), "m": (21.2, 49.0), "l": (46.5, 109.1),
                         "x": (86.7, 205.7)}
# YOLO-NAS (super-gradients 3.7.1) as it trains, before its QARepVGG blocks are fused for
# deployment (Deci's published 12.2/31.9/44.5 M are the fused sizes): measured with
# `models.get(arch, num_classes=80)` and torch's FlopCounterMode at 640 px.
MODEL_SIZES["yolo-nas"] = {"s": (19.05, 33.9), "m": (51.18, 94.2), "l": (66.98, 129.0)}
SUPPORTED_FAMILIES = tuple(MODEL_SIZES)
YOLO_NAS = "yolo-nas"
# super-gradients' architecture names, which is how a YOLO-NAS job names its model.
NAS_NAME = re.compile(r"^yolo_nas_(?P<scale>[sml])$")
# The train_args a YOLO-NAS job may set -> the engine runner's request field (None: accepted,
# no effect there: the runner loads data in-process and draws no plots). Any other key is
# refused at admission, not ignored (`yoloq.engine.yolonas.runner` documents the fields).
NAS_TRAIN_ARGS: dict[str, str | None] = {
    "seed": "seed", "lr0": "lr0", "lrf": "lrf", "warmup_epochs": "warmup_epochs", "optimizer": "optimizer",
    "momentum": "momentum", "weight_decay": "weight_decay", "deterministic": "deterministic",
    "val": "val", "workers": None, "plots": None}
NAS_OPTIMIZERS = ("AdamW", "SGD")
# ultralytics' own short names for the families (as in its docs and model YAML folders).
VERSIONS = {"yolov5u": "v5u", "yolov8": "v8", "yolov9": "v9", "yolov10": "v10",
            "yolo11": "11", "yolo12": "12", "yolo26": "26", "yolov5": "v5", "yolo-nas": "nas"}
ULTRALYTICS, YOLOV5 = "ultralytics", "yolov5"
ENGINES = {**{family: ULTRALYTICS for family in MODEL_SIZES}, "yolov5": YOLOV5, YOLO_NAS: YOLO_NAS}
# Recognised, never trained: the reason is the refusal line.
REFUSED_FAMILIES = {
    "super-gradients": "a YOLO-NAS file of super-gradients or ultralytics is not a yoloq checkpoint; "
                       "yoloq's YOLO-NAS engine builds the model from its architecture name "
                       "(model: yolo_nas_s, yolo_nas_m or yolo_nas_l) and resumes only its own "
                       "checkpoints",
    "rtdetr": "RT-DETR is a transformer detector with its own trainer and loss; its deformable "
              "attention (grid_sample) has no deterministic CUDA backward, so a resumed segment "
              "cannot continue exactly, and yoloq's exact-resume trainer does not cover it",
    "yoloe": "YOLOE is an open-vocabulary model: training needs text or visual prompt embeddings "
             "from a MobileCLIP model that ultralytics downloads at train time; yoloq trains offline",
    "yolo-world": "YOLO-World is an open-vocabulary model: training needs CLIP text embeddings from "
                  "a model that ultralytics downloads at train time; yoloq trains offline",
}
_REFUSED_FIXES = {"super-gradients": "write `model: yolo_nas_s` (or yolo_nas_m, yolo_nas_l) to train "
                                      "YOLO-NAS with yoloq's engine (`yoloq engine install yolo-nas`)"}
_REFUSED_NAMES = (  # (pattern on the file name, family); checked before the YOLO name grammar
    (re.compile(r"^yolo[-_]?nas.*\.(ya?ml|pt|pth)$"), "super-gradients"),
    (re.compile(r"^rt-?detr"), "rtdetr"),
    (re.compile(r"^yoloe"), "yoloe"),
    (re.compile(r"^yolo(v8|v\d+|\d+)?[a-z]?-world"), "yolo-world"),
)
# YOLOv5 scales by (depth_multiple, width_multiple), as in the yolov5 repository's models/*.yaml.
_V5_SCALES = {(0.33, 0.25): "n", (0.33, 0.5): "s", (0.67, 0.75): "m", (1.0, 1.0): "l", (1.33, 1.25): "x"}
_NAME = re.compile(r"^yolo(?P<v>v?)(?P<num>\d+)(?P<scale>[nsmlxtcbe])?(?P<p6>6)?(?P<u>u)?"
                   r"(?P<variant>-[a-z0-9-]+)?$")


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


def engine_for(family: str) -> str:
    """The engine that trains a family: "ultralytics", "yolov5" or "yolo-nas"."""
    return ENGINES.get(family, ULTRALYTICS)


def refused_family_of_name(name: str) -> str:
    """"super-gradients", "rtdetr", "yoloe" or "yolo-world" when the file name says so, else ""."""
    stem = Path(name).name.lower()
    return next((family for pattern, family in _REFUSED_NAMES if pattern.match(stem)), "")


def refuse_family(field: str, name: str, family: str) -> None:
    """Raise the refusal of a recognised family no engine trains (no-op for "")."""
    if family in REFUSED_FAMILIES:
        raise ModelError(field, f"{Path(name).name!r} is a {family} model, not trained here: "
                         f"{REFUSED_FAMILIES[family]}",
                         _REFUSED_FIXES.get(family, "train a YOLO detect model (e.g. yolo11n.yaml, or an "
                                                    "original YOLOv5 YAML)"))


def is_yolov5_cfg(cfg: Any) -> bool:
    """The ultralytics/yolov5 repository's model format: anchors at the top level."""
    return isinstance(cfg, dict) and "anchors" in cfg and "backbone" in cfg and "head" in cfg


def yolov5_task(cfg: dict[str, Any]) -> str:
    """The yolov5 head module: Detect, Segment (yolov5-seg) or Classify."""
    try:
        module = str(cfg["head"][-1][2]).lower()
    except (KeyError, IndexError, TypeError):
        return "unknown"
    return {"detect": "detect", "segment": "segment", "classify": "classify"}.get(module, "unknown")


def yolov5_scale(cfg: dict[str, Any]) -> str:
    """n/s/m/l/x from the depth and width multiples; the nearest width for custom multiples."""
    try:
        depth, width = float(cfg["depth_multiple"]), float(cfg["width_multiple"])
    except (KeyError, TypeError, ValueError):
        return "s"
    exact = _V5_SCALES.get((round(depth, 2), round(width, 2)))
    return exact or min(_V5_SCALES.items(), key=lambda kv: abs(kv[0][1] - width))[1]

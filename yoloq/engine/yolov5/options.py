"""yolov5's `opt` namespace and `hyp` dict for one segment, from the job spec.

The spec's `train_args` use ultralytics' names; the ones yolov5 shares keep their
meaning (hyperparameters from hyp.scratch-low.yaml, and a few options). Any other
argument is refused with one line: yolov5 has no such setting, and silently
dropping it would train a different recipe than the spec asks for.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import yaml

from yoloq.base.errors import UserError

HYP_FILE = "hyp.scratch-low.yaml"  # yolov5's default for training from scratch
OPTION_ARGS = {  # ultralytics name -> yolov5 option
    "optimizer": "optimizer", "cos_lr": "cos_lr", "label_smoothing": "label_smoothing",
    "patience": "patience", "workers": "workers", "rect": "rect", "single_cls": "single_cls",
    "freeze": "freeze", "cache": "cache", "multi_scale": "multi_scale",
}
OWN_ARGS = {"amp", "seed", "deterministic", "verbose", "plots", "val", "exist_ok"}  # handled by yoloq
OPTIMIZERS = ("SGD", "Adam", "AdamW")


def default_hyp() -> dict[str, Any]:
    """yolov5's hyp.scratch-low.yaml, read from the installed package."""
    found = importlib.util.find_spec("yolov5")
    if found is None or not found.submodule_search_locations:
        raise UserError("model", "an original YOLOv5 model needs the yolov5 package",
                        "pip install 'yoloq[yolov5]'")
    path = Path(next(iter(found.submodule_search_locations))) / "data" / "hyps" / HYP_FILE
    return yaml.safe_load(path.read_text())


def split_train_args(train_args: dict[str, Any], hyp: dict[str, Any]) -> tuple[dict, dict]:
    """(hyp overrides, option overrides); UserError for an argument yolov5 has no use for."""
    hyp_over, opt_over = {}, {}
    for key, value in train_args.items():
        if key in hyp:
            hyp_over[key] = value
        elif key in OPTION_ARGS:
            opt_over[OPTION_ARGS[key]] = _option(key, value)
        elif key not in OWN_ARGS:
            raise UserError(f"train_args.{key}", "is not a setting of the yolov5 engine "
                            "(original YOLOv5 trains through the yolov5 package)",
                            f"remove it; yolov5 takes {', '.join(sorted(hyp))}, "
                            f"{', '.join(sorted(OPTION_ARGS))} and amp")
    return hyp_over, opt_over


def _option(key: str, value: Any) -> Any:
    if key == "optimizer" and value not in OPTIMIZERS:
        raise UserError("train_args.optimizer", f"yolov5 has no optimizer {value!r}",
                        f"use one of {', '.join(OPTIMIZERS)}")
    if key == "freeze":
        return list(value) if isinstance(value, (list, tuple)) else [int(value or 0)]
    if key == "cache":
        return None if value in (False, None) else ("ram" if value is True else str(value))
    return value


def build(spec: Any, data_yaml: Path, save_dir: Path, weights: str, cfg: str,
          resume: bool) -> tuple[dict[str, Any], argparse.Namespace]:
    """(hyp, opt) for `yolov5.train.train`: the spec's recipe, offline, no plots or uploads."""
    hyp = default_hyp()
    hyp_over, opt_over = split_train_args(dict(spec.train_args), hyp)
    hyp.update(hyp_over)
    opt = argparse.Namespace(
        weights=weights, cfg=cfg, data=str(data_yaml), hyp=dict(hyp), epochs=spec.epochs,
        batch_size=spec.batch, imgsz=spec.imgsz, rect=False, resume=resume, nosave=False, noval=False,
        noautoanchor=False, noplots=True, evolve=None, bucket="", cache=None, image_weights=False,
        device="", multi_scale=False, single_cls=False, optimizer="SGD", sync_bn=False,
        workers=0, project=str(save_dir.parent), name=save_dir.name, exist_ok=True, quad=False,
        cos_lr=False, label_smoothing=0.0, patience=100, freeze=[0], save_period=-1, seed=spec.seed,
        local_rank=-1, entity=None, bbox_interval=-1, artifact_alias="latest", neptune_token=None,
        neptune_project=None, neptune_resume_id=None, s3_upload_dir=None, upload_dataset=False,
        hf_model_id=None, hf_token=None, hf_private=False, hf_dataset_id=None, roboflow_token=None,
        roboflow_upload=False, save_dir=str(save_dir))
    for key, value in opt_over.items():
        setattr(opt, key, value)
    return hyp, opt

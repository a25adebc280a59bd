"""Keep the yolov5 package offline, and find the objects its `train()` keeps to itself.

Every network call yolov5 makes on the training path, and how it is neutralised:

- `check_dataset` fetches Arial.ttf for plots: a font of that name is put in
  `YOLOV5_CONFIG_DIR` first (`apply`), and `check_font` is pointed at that folder.
- `attempt_download_from_hub` (train.py and `attempt_download`) asks the
  Hugging Face Hub about every weights path; `attempt_download` asks GitHub for
  release assets when a .pt is missing: both are replaced by a local-file check.
- `check_amp` downloads yolov5n.pt and bus.jpg on CUDA: replaced by the spec's `amp`.
- `Loggers` would start TensorBoard, W&B, ClearML, Comet or Neptune when installed:
  only the CSV logger is kept. Plots, dataset upload, S3/HF/Roboflow uploads,
  `--evolve` and `check_git_info` are off in the options (`options.py`).

One more patch is for numpy, not the network: numpy 2 removed `np.trapz`, which
yolov5's `compute_ap` calls; it is replaced by the same function on `np.trapezoid`.

The patches are module attributes of `yolov5.train`, `yolov5.models.experimental`
and `yolov5.utils.metrics`, set for the duration of one `train()` call and restored
afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yoloq.base import offline
from yoloq.base.errors import ModelError


def apply() -> Path:
    """yoloq's offline environment plus yolov5's: its config folder, with the plot fonts in it."""
    paths = offline.apply()
    config = Path(os.environ.setdefault("YOLOV5_CONFIG_DIR", str(paths.root / "yolov5")))
    config.mkdir(parents=True, exist_ok=True)
    ultralytics_fonts = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    for font in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (config / font).exists() and (ultralytics_fonts / font).exists():
            shutil.copyfile(ultralytics_fonts / font, config / font)
    # yolov5 7.0 calls torch.load() without weights_only; torch >= 2.6 then refuses its own
    # pickled models. Only yolov5's calls are affected: every other caller passes the flag.
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    return config


@dataclass
class Captured:
    """What `train()` builds and never returns: filled in by the patched constructors."""

    model: Any = None
    ema: Any = None
    optimizer: Any = None
    train_loader: Any = None
    stopper: Any = None
    on_resume: Callable[..., tuple[float, int, int]] | None = None
    stopper_state: dict[str, Any] = field(default_factory=dict)


def local_file(file: Any, *args: Any, **kwargs: Any) -> str:
    """`attempt_download` without the download: the file must exist here."""
    path = Path(str(file).strip().replace("'", ""))
    if not path.is_file():
        raise ModelError("model", f"weights not found: {path} (nothing is downloaded)",
                         "give the path to a local .pt file")
    return str(path)


@contextlib.contextmanager
def patched(captured: Captured, amp: bool) -> Iterator[Any]:
    """Import `yolov5.train` and patch it for one offline, observable `train()` call."""
    from yolov5 import train
    from yolov5.models import experimental
    from yolov5.utils import general, metrics
    from yolov5.utils.loggers import Loggers

    replacements = {
        (train, "attempt_download_from_hub"): lambda *a, **k: None,
        (train, "attempt_download"): local_file,
        (experimental, "attempt_download"): local_file,
        (train, "check_amp"): lambda model: amp and next(model.parameters()).device.type == "cuda",
        (train, "Loggers"): functools.partial(Loggers, include=("csv",)),
        (train, "ModelEMA"): _capturing(train.ModelEMA, captured, "ema", model_arg=True),
        (train, "EarlyStopping"): _capturing(train.EarlyStopping, captured, "stopper"),
        (train, "smart_optimizer"): _returning(train.smart_optimizer, captured, "optimizer"),
        (train, "create_dataloader"): _first_loader(train.create_dataloader, captured),
        (train, "smart_resume"): lambda *a, **k: captured.on_resume(*a, **k),
        (metrics, "compute_ap"): compute_ap,
        # read from YOLOV5_CONFIG_DIR at import: pin it, should yolov5 be imported before apply()
        (general, "CONFIG_DIR"): Path(os.environ.get("YOLOV5_CONFIG_DIR") or apply()),
    }
    saved = {key: getattr(*key) for key in replacements}
    try:
        for (module, name), value in replacements.items():
            setattr(module, name, value)
        yield train
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def compute_ap(recall: Any, precision: Any) -> tuple[Any, Any, Any]:
    """yolov5's compute_ap (101-point interpolated AP), with np.trapezoid for numpy 2."""
    import numpy as np

    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([1.0], precision, [0.0]))
    mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
    x = np.linspace(0, 1, 101)
    integrate = getattr(np, "trapezoid", None) or np.trapz
    return integrate(np.interp(x, mrec, mpre), x), mpre, mrec


def _capturing(cls: type, captured: Captured, slot: str, model_arg: bool = False) -> type:
    """A subclass that records its instance (and, for ModelEMA, the live model) in `captured`."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        setattr(captured, slot, self)
        if model_arg:
            captured.model = args[0] if args else kwargs["model"]
        if slot == "stopper" and captured.stopper_state:
            self.__dict__.update(captured.stopper_state)  # EarlyStopping's patience counter

    return type(cls.__name__, (cls,), {"__init__": __init__})


def _returning(function: Callable[..., Any], captured: Captured, slot: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        setattr(captured, slot, result)
        return result

    return wrapper


def _first_loader(function: Callable[..., Any], captured: Captured) -> Callable[..., Any]:
    """create_dataloader is called for train first, then val: keep the train loader."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        if captured.train_loader is None:
            captured.train_loader = result[0]
        return result

    return wrapper

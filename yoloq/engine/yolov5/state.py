"""The yolov5 segment checkpoint: yolov5's own `last.pt` layout plus the exact state.

yolov5 saves `model` and `ema` in fp16 and restarts its RNG streams, its data
order and its early-stopping counter on resume. The file written here keeps
yolov5's keys (so `yolov5` itself, and yoloq's fingerprint, read it as a YOLOv5
checkpoint), adds `train_args` (what a resumed segment must match) and puts the
exact state under the same `yoloq` key as the ultralytics engine's checkpoints:

    yoloq = {"format": 1, "engine": "yolov5", "resumable": bool, "epochs_done": int,
             "model": fp32 state_dict, "ema": fp32 state_dict, "ema_updates": int,
             "optimizer": state_dict | None, "stopper": {...}, "best": uint8 tensor | None,
             "results_csv": str}
"""

from __future__ import annotations

from copy import deepcopy
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from yoloq.engine import checkpoint
from yoloq.engine.yolov5.environment import Captured
from yoloq.base.errors import UserError

ENGINE = "yolov5"
MUST_MATCH = ("epochs", "imgsz", "batch", "seed")


def train_args(spec: Any) -> dict[str, Any]:
    return {"model": Path(spec.model).name, "data": str(spec.data), "epochs": spec.epochs,
            "imgsz": spec.imgsz, "batch": spec.batch, "seed": spec.seed, "task": "detect"}


def save(path: Path, captured: Captured, opt: Any, spec: Any, epoch: int, best_fitness: float,
         resumable: bool, best: Path) -> None:
    """Write `path` atomically: yolov5's checkpoint dict, plus train_args and the exact state."""
    from yolov5 import __version__
    from yolov5.utils.torch_utils import de_parallel

    model, ema = de_parallel(captured.model), captured.ema
    results = Path(opt.save_dir) / "results.csv"
    best_bytes = best.read_bytes() if resumable and best.is_file() else None
    state = {
        "format": checkpoint.FORMAT, "engine": ENGINE, "resumable": resumable, "epochs_done": epoch + 1,
        "model": checkpoint.fp32_state(model) if resumable else None,
        "ema": checkpoint.fp32_state(ema.ema) if resumable else None,
        "ema_updates": ema.updates,
        "optimizer": deepcopy(captured.optimizer.state_dict()) if resumable else None,
        "stopper": {k: getattr(captured.stopper, k) for k in ("best_fitness", "best_epoch")},
        "best": torch.frombuffer(bytearray(best_bytes), dtype=torch.uint8) if best_bytes else None,
        "results_csv": results.read_text() if results.is_file() else "",
    }
    ckpt = {
        "epoch": epoch, "best_fitness": best_fitness, "model": deepcopy(model).half(),
        "ema": deepcopy(ema.ema).half(), "updates": ema.updates,
        "optimizer": captured.optimizer.state_dict(), "opt": vars(opt),
        "date": datetime.now().isoformat(), "yolov5pip_version": __version__,
        "train_args": train_args(spec), checkpoint.KEY: state,
    }
    checkpoint.atomic_write_bytes(Path(path), checkpoint.serialize(ckpt))


def load(path: Path, spec: Any, stop_after_epoch: int) -> checkpoint.ResumePoint:
    """Read a yolov5 segment checkpoint and check it against the spec."""
    point = checkpoint.read_resume_point(path)
    if point.state.get("engine") != ENGINE:
        raise UserError("resume_from", f"{path} was not written by the yolov5 engine",
                        "resume an original YOLOv5 job only from its own checkpoints")
    if point.epochs_done >= stop_after_epoch:
        raise UserError("stop_after_epoch", f"{stop_after_epoch} epochs are already done in {path}",
                        f"ask for more than {point.epochs_done}")
    expected = train_args(spec)
    for key in MUST_MATCH + ("model",):
        if str(point.train_args.get(key)) != str(expected[key]):
            raise UserError(f"spec.{key}", f"checkpoint was trained with {key}={point.train_args.get(key)!r}, "
                            f"the spec says {expected[key]!r}", "resume with the job's original spec")
    return point


def restore_outputs(point: checkpoint.ResumePoint, save_dir: Path) -> None:
    """best.pt and results.csv of the earlier segments, in this segment's (maybe new) folder."""
    weights = save_dir / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    best = checkpoint.best_bytes(point.state)
    if best is not None:
        checkpoint.atomic_write_bytes(weights / "best.pt", best)
    results = save_dir / "results.csv"
    if point.state.get("results_csv") and not results.exists():
        results.write_text(point.state["results_csv"])


def restore(point: checkpoint.ResumePoint, captured: Captured) -> tuple[float, int]:
    """Load the exact state into the objects train() built; (best_fitness, start_epoch)."""
    from yolov5.utils.torch_utils import de_parallel

    state = point.state
    de_parallel(captured.model).load_state_dict(state["model"])
    captured.ema.ema.load_state_dict(state["ema"])
    captured.ema.updates = state["ema_updates"]
    captured.optimizer.load_state_dict(state["optimizer"])
    return float(point.header.get("best_fitness") or 0.0), point.epochs_done

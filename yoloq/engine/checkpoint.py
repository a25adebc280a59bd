"""The segment checkpoint: one file, a normal ultralytics `last.pt` plus a `yoloq` key.

The header (epoch, best_fitness, stopper, fp16 `ema` model, train_args,
train_metrics, train_results, version) keeps ultralytics' layout, so other code
can fingerprint it, and `YOLO(path)` loads it. ultralytics' own resume state is
lossy (fp16 EMA and optimizer), so the header's `optimizer` is left out and the
exact state lives under `yoloq`:

    yoloq = {"format": 1, "resumable": bool, "epochs_done": int,
             "model": fp32 state_dict, "ema": fp32 state_dict, "ema_updates": int,
             "optimizer": fp32 state_dict | None, "scaler": dict | None,
             "best": uint8 tensor holding best.pt's bytes | None}

A finished checkpoint (`resumable` False: the last epoch, or early stopping) is
written before ultralytics' final evaluation and still holds best.pt, so a job
whose evaluate/export was interrupted finalises from it (`finished_best`). It keeps
the optimizer and scaler state too, so `yoloq extend` can train on from it exactly
(`read_resume_point(path, epochs)`).

Files are written atomically (temp file, fsync, os.replace): a kill mid-write
leaves the previous checkpoint intact.
"""

from __future__ import annotations

import csv
import io
import os
from copy import deepcopy
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from yoloq.base.atomic import write_atomically
from yoloq.base.errors import UserError

FORMAT = 1
KEY = "yoloq"


@dataclass(frozen=True)
class ResumePoint:
    """A loaded checkpoint that a segment can continue from."""

    path: Path
    header: dict[str, Any]
    state: dict[str, Any]

    @property
    def epochs_done(self) -> int:
        return int(self.state["epochs_done"])

    @property
    def train_args(self) -> dict[str, Any]:
        return dict(self.header.get("train_args") or {})


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a torn one."""
    write_atomically(path, lambda fh: fh.write(data), prefix=f".{path.name}.")


def serialize(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def fp32_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of a module's state (parameters and buffers, exact)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def header(trainer: Any) -> dict[str, Any]:
    """ultralytics' checkpoint layout (see BaseTrainer.save_model), optimizer left out."""
    from ultralytics import __version__

    ema = deepcopy(trainer.ema.ema).half().to(memory_format=torch.contiguous_format)
    if hasattr(ema, "criterion"):
        ema.criterion = None
    for value in ema.state_dict().values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            torch.nan_to_num_(value)  # clamp fp16 overflow, as ultralytics does
    return {
        "epoch": trainer.epoch,
        "best_fitness": trainer.best_fitness,
        "stopper": {"best_fitness": trainer.stopper.best_fitness,
                    "best_epoch": trainer.stopper.best_epoch},
        "model": None,
        "ema": ema,
        "updates": trainer.ema.updates,
        "modelopt": None,
        "optimizer": None,  # the exact (fp32) optimizer state is under KEY
        "scaler": trainer.scaler.state_dict(),
        "train_args": vars(trainer.args),
        "train_metrics": {**trainer.metrics, "fitness": trainer.fitness},
        "train_results": trainer.read_results_csv(),
        "date": datetime.now().astimezone().isoformat(),
        "version": __version__,
        "license": "AGPL-3.0 (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com",
    }


def exact_state(trainer: Any, resumable: bool, best_bytes: bytes | None) -> dict[str, Any]:
    """What ultralytics' header loses: fp32 model, EMA and optimizer, and best.pt so far."""
    from ultralytics.utils.torch_utils import unwrap_model

    return {
        "format": FORMAT,
        "resumable": resumable,
        "epochs_done": trainer.epoch + 1,
        "model": fp32_state(unwrap_model(trainer.model)),
        "ema": fp32_state(trainer.ema.ema),
        "ema_updates": trainer.ema.updates,
        # kept when finished too: an extended job trains on from here (`yoloq extend`)
        "optimizer": deepcopy(trainer.optimizer.state_dict()),
        "scaler": trainer.scaler.state_dict(),
        # kept in a finished checkpoint too: evaluate/export after a crash start from it
        "best": _bytes_tensor(best_bytes) if best_bytes else None,
    }


def _bytes_tensor(data: bytes) -> torch.Tensor:
    """Bytes as a tensor: stored beside the pickle, not inside it, so headers stay small."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def best_bytes(state: dict[str, Any]) -> bytes | None:
    tensor = state.get("best")
    return None if tensor is None else tensor.numpy().tobytes()


def finished_best(path: str | os.PathLike[str], dest: Path) -> Path:
    """Write best.pt from a finished checkpoint into `dest` (stripped like ultralytics' own)."""
    loaded = torch.load(Path(path), map_location="cpu", weights_only=False)
    state = loaded.get(KEY) if isinstance(loaded, dict) else None
    if not isinstance(state, dict) or state.get("resumable") is not False:
        raise UserError("checkpoint", f"{path} is not a finished yoloq checkpoint",
                        "finalise only a job whose last epoch was trained")
    data = best_bytes(state)
    if data is None:  # no epoch ever improved fitness: the final weights are the best there are
        data = serialize({k: v for k, v in loaded.items() if k != KEY})
    atomic_write_bytes(dest, data)
    from ultralytics.utils.torch_utils import strip_optimizer

    strip_optimizer(dest)
    return dest


def read_resume_point(path: str | os.PathLike[str], epochs: int | None = None) -> ResumePoint:
    """Load a checkpoint written by a segment and check that it can be resumed. A finished
    one can, when `epochs` (the job's total now) is past the total it was trained for
    (`yoloq extend`) and it kept its optimizer state."""
    path = Path(path)
    if not path.is_file():
        raise UserError("resume_from", f"checkpoint not found: {path}",
                        "pass the checkpoint file a previous segment returned")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a torn or foreign file
        raise UserError("resume_from", f"not a readable checkpoint: {path} ({exc.__class__.__name__})",
                        "pass the checkpoint file a previous segment returned") from None
    state = loaded.get(KEY) if isinstance(loaded, dict) else None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError("resume_from", f"{path} has no yoloq resume state",
                        "resume only from checkpoints written by yoloq segments")
    header_only = {k: v for k, v in loaded.items() if k != KEY}
    trained_for = int((header_only.get("train_args") or {}).get("epochs") or 0)
    extending = epochs is not None and epochs > trained_for
    if not state.get("resumable") and not extending:
        raise UserError("resume_from", f"{path} is a finished job's checkpoint",
                        "nothing is left to train; extend the job (yoloq extend) to train further")
    if not state.get("resumable") and state.get("optimizer") is None:
        raise UserError("resume_from", f"{path} was finished without its optimizer state (a "
                        "yoloq release before extend), so it cannot be extended exactly",
                        "fine-tune from it instead: a new job with model: <its best.pt>")
    return ResumePoint(path=path, header=header_only, state=state)


def restore_results_csv(csv_path: Path, results: dict[str, list[Any]] | None) -> None:
    """Recreate results.csv from a checkpoint's `train_results`, so a moved run keeps its history."""
    if not results or csv_path.exists():
        return
    columns = list(results)
    rows = zip(*(results[c] for c in columns))
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["%.6g" % v if isinstance(v, (int, float)) else v for v in row])

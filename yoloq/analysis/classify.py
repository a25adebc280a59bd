"""Job class (short experiment or full training), segment size, and bit-exact resume."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# A job is `short` when, on the reference GPU (gpus.REFERENCE), it is estimated to take at most
# SHORT_MAX_S and asks for at most SHORT_MAX_EPOCHS epochs; anything else is `full`.
SHORT_MAX_S = 30 * 60
SHORT_MAX_EPOCHS = 30
# Without an explicit `segment_epochs`, a segment is as many epochs as fit SEGMENT_TARGET_S, so the
# ~4 s process start per segment stays around 1% of its length.
SEGMENT_TARGET_S = 10 * 60
ULTRALYTICS_NBS = 64  # ultralytics' default nominal batch size (cfg/default.yaml `nbs`)


@dataclass(frozen=True)
class Exactness:
    exact_resume: bool
    reason: str | None  # why a resumed run would differ from an uninterrupted one
    accumulate: int
    batches_per_epoch: int


def job_class(reference_duration_s: float, epochs: int) -> str:
    return "short" if reference_duration_s <= SHORT_MAX_S and epochs <= SHORT_MAX_EPOCHS else "full"


def segment_epochs(requested: int | None, epoch_s: float, epochs: int) -> int:
    if requested:
        return min(requested, epochs)
    return max(1, min(epochs, math.floor(SEGMENT_TARGET_S / max(epoch_s, 1e-9))))


def accumulate_count(batch: int, nbs: int) -> int:
    """ultralytics' trainer: `max(round(nbs / batch), 1)` batches per optimizer step."""
    return max(round(nbs / batch), 1)


def exactness(train_args: dict[str, Any], batch: int, train_images: int) -> Exactness:
    """Whether a job stopped at an epoch boundary resumes bit-exactly.

    It cannot when training is not deterministic, or when gradient accumulation is
    pending at epoch boundaries: ultralytics steps the optimizer every `accumulate`
    batches counted across epochs, so a boundary is clean only when the batches per
    epoch (ceil(train_images / batch)) are a multiple of `accumulate`.
    """
    nbs = int(train_args.get("nbs", ULTRALYTICS_NBS))
    accumulate = accumulate_count(batch, nbs)
    batches = math.ceil(train_images / batch)
    if train_args.get("deterministic", True) is False:
        return Exactness(False, "train_args.deterministic is false: kernels and data order may differ "
                         "after a resume (fix: remove it or set it to true)", accumulate, batches)
    if batches % accumulate:
        return Exactness(False, f"{batches} batches per epoch is not a multiple of the gradient accumulation "
                         f"count {accumulate} (nbs {nbs} / batch {batch}): pending gradients are lost at "
                         f"each segment boundary (fix: set train_args.nbs: {batch} so every batch steps, "
                         f"or pick a batch that divides evenly)", accumulate, batches)
    return Exactness(True, None, accumulate, batches)

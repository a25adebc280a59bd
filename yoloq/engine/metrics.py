"""Per-epoch metric names, as ultralytics writes them to results.csv."""

from __future__ import annotations

from typing import Any

TRAIN_LOSSES = ("train/box_loss", "train/cls_loss", "train/dfl_loss")
VAL_LOSSES = ("val/box_loss", "val/cls_loss", "val/dfl_loss")
DETECTION = ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")
LEARNING_RATES = ("lr/pg0", "lr/pg1", "lr/pg2")
# What every detection epoch reports (other tasks add their own, e.g. "(M)" mask metrics).
DETECTION_EPOCH = TRAIN_LOSSES + DETECTION + VAL_LOSSES + LEARNING_RATES


def epoch_metrics(trainer: Any) -> dict[str, float]:
    """The row ultralytics appends to results.csv for the epoch just finished (minus epoch/time)."""
    row = {**trainer.label_loss_items(trainer.tloss), **(trainer.metrics or {}), **trainer.lr}
    return {name: float(value) for name, value in row.items()}

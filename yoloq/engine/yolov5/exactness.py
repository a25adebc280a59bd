"""When a resumed yolov5 segment continues bit-identically, and when it cannot.

yolov5's loop keeps the batch index of its last optimizer step in a local variable
(`last_opt_step`) that no checkpoint holds: a resumed loop starts it at -1 and so
steps after the first batch, where an uninterrupted loop waits until `accumulate`
batches have passed since its last step. Pending gradients are not the problem
(yolov5 zeroes them at every epoch start, in both runs); the step timing is. So a
boundary is always exact when `accumulate` is 1 there: after warmup that is
round(64 / batch) == 1 (batch >= 43); during warmup yolov5 ramps it up from 1.
With `accumulate` > 1 a boundary is exact only if the uninterrupted run happened to
step at that first batch too; the engine warns, and `yoloq analyse` says so. The rule
itself lives with admission (`yoloq.analysis.models`), which must not import torch.
"""

from __future__ import annotations

from yoloq.analysis.models import yolov5_accumulate_at as accumulate_at

__all__ = ["accumulate_at", "boundary_problem"]


def boundary_problem(epoch: int, batch: int, batches_per_epoch: int, warmup_epochs: float) -> str | None:
    """None when resuming at `epoch` is always exact; else why it may not be, in one line."""
    accumulate = accumulate_at(epoch, batch, batches_per_epoch, warmup_epochs)
    if accumulate == 1:
        return None
    return (f"resuming at epoch {epoch} may not be bit-exact: yolov5 accumulates {accumulate} batches per "
            f"optimizer step there and does not save when it last stepped (batch >= 43 keeps every "
            f"boundary exact)")

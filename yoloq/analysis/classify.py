"""Job class (short experiment or full training) and bit-exact resume."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# A job is `short` when, on the reference GPU (gpus.REFERENCE), it is estimated to take at most
# SHORT_MAX_S and asks for at most SHORT_MAX_EPOCHS epochs; anything else is `full`.
SHORT_MAX_S = 30 * 60
SHORT_MAX_EPOCHS = 30
ULTRALYTICS_NBS = 64  # ultralytics' default nominal batch size (cfg/default.yaml `nbs`)
ULTRALYTICS_WARMUP_EPOCHS = 3.0  # cfg/default.yaml `warmup_epochs`
# yoloq adds at most one (smaller) optimizer step per epoch where stock ultralytics would carry
# gradients over the boundary. That is worth a warning only when it is a material share of the
# epoch's steps: accumulate / batches_per_epoch above this (fewer than 10 steps per epoch).
MATERIAL_STEP_SHARE = 0.1


@dataclass(frozen=True)
class Exactness:
    exact_resume: bool
    reason: str | None  # why a resumed run would differ from an uninterrupted one
    accumulate: int
    batches_per_epoch: int
    pending_boundaries: tuple[int, ...]  # epochs after which stock ultralytics would hold unapplied gradients
    accumulation_warning: str | None


def job_class(reference_duration_s: float, epochs: int) -> str:
    return "short" if reference_duration_s <= SHORT_MAX_S and epochs <= SHORT_MAX_EPOCHS else "full"


def accumulate_count(batch: int, nbs: int) -> int:
    """ultralytics' trainer: `max(round(nbs / batch), 1)` batches per optimizer step."""
    return max(round(nbs / batch), 1)


def pending_boundaries(batches: int, epochs: int, accumulate: int, warmup_iters: int) -> list[int]:
    """Epoch boundaries (1-based epoch numbers) at which gradients are accumulated but not applied.

    Replays ultralytics' step rule (`ni - last_opt_step >= accumulate`, with accumulate ramping
    from 1 during the warmup iterations) over the warmup, then uses its period afterwards.
    """
    last, pending = -1, []
    replayed = min(warmup_iters + 1, batches * epochs)
    for ni in range(replayed):
        step_every = accumulate
        if warmup_iters and ni <= warmup_iters:
            step_every = max(1, round((accumulate - 1) / warmup_iters * ni + 1))  # as np.interp
        if ni - last >= step_every:
            last = ni
        if (ni + 1) % batches == 0 and last != ni and (ni + 1) // batches < epochs:
            pending.append((ni + 1) // batches)
    for epoch in range(replayed // batches + 1, epochs):
        end = epoch * batches - 1
        if end >= replayed and (end - last) % accumulate:
            pending.append(epoch)
    return pending


def exactness(train_args: dict[str, Any], batch: int, train_images: int, epochs: int) -> Exactness:
    """Whether a job stopped at an epoch boundary resumes bit-exactly, and what to warn about.

    Not when training is not deterministic. Gradient accumulation is the other hazard:
    stock ultralytics steps the optimizer every `accumulate` (= max(round(nbs / batch), 1))
    batches counted across epochs (ramping up from 1 during warmup), so gradients can be
    pending at an epoch boundary and a resumed run (which restarts that count) diverges.
    yoloq's trainer (yoloq.engine.accumulation) always steps at an epoch's last batch, so
    resume stays exact; where stock ultralytics would have had gradients pending, yoloq
    makes one extra, smaller step. That is reported as a warning only where it is a
    material share of the epoch's steps (MATERIAL_STEP_SHARE).
    """
    nbs = int(train_args.get("nbs", ULTRALYTICS_NBS))
    batches = max(1, math.ceil(train_images / batch))
    accumulate = accumulate_count(batch, nbs)
    warmup_epochs = min(float(train_args.get("warmup_epochs", ULTRALYTICS_WARMUP_EPOCHS)), max(epochs - 1, 0))
    warmup_iters = round(warmup_epochs * batches) if warmup_epochs > 0 else 0
    pending = pending_boundaries(batches, epochs, accumulate, warmup_iters)
    warning = _accumulation_warning(pending, epochs, batches, accumulate, nbs, batch)
    if train_args.get("deterministic", True) is False:
        return Exactness(False, "train_args.deterministic is false: kernels may differ after a resume "
                         "(fix: remove it or set it to true)", accumulate, batches, tuple(pending), warning)
    return Exactness(True, None, accumulate, batches, tuple(pending), warning)


def _accumulation_warning(pending: list[int], epochs: int, batches: int, accumulate: int, nbs: int,
                          batch: int) -> str | None:
    if not pending or accumulate / batches <= MATERIAL_STEP_SHARE:
        return None
    per_epoch = batches / accumulate
    return (f"gradient accumulation: ultralytics steps the optimizer every {accumulate} batches (accumulate = max(round(nbs {nbs} / "
            f"batch {batch}), 1)) but an epoch has only {batches}, so at {len(pending)} of {epochs - 1} epoch "
            f"boundaries gradients would be pending; yoloq steps at each epoch's last batch (resume stays exact), "
            f"which adds one smaller optimizer step to those epochs (plain ultralytics makes about "
            f"{per_epoch:.2g} per epoch). More images per epoch make the difference smaller")

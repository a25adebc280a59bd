"""Checkpoint frequency by cost, pure.

A preempted segment always checkpoints at the epoch boundary where it stops
(and the last epoch of a segment or a job always checkpoints): nothing a
preemption asks for is ever lost. Periodic checkpoints inside a segment exist
only to bound what a crash loses. So the interval, in epochs, is chosen from
the measured checkpoint cost `checkpoint_s` (serialise + write to the store)
and the epoch time `epoch_s`:

- overhead: checkpoint_s / (k * epoch_s + checkpoint_s) <= `max_overhead` (2%),
  i.e. k >= checkpoint_s (1 - max_overhead) / (max_overhead * epoch_s);
- crash loss: a crash just before a checkpoint loses k * epoch_s + checkpoint_s,
  which must be <= `max_loss_s` (default 600 s).

The smallest k meeting the overhead budget is chosen (the least loss for the
budget). When the two cannot both hold (a slow store, short epochs), the crash
bound wins and `overhead_met` is False; when one epoch alone is longer than the
bound, k = 1 and `loss_met` is False. Exactness holds at every interval: a
resume starts from a checkpointed epoch boundary, whichever it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_OVERHEAD = 0.02
DEFAULT_MAX_LOSS_S = 600.0


@dataclass(frozen=True)
class CheckpointPlan:
    every_epochs: int
    overhead: float  # checkpoint_s / (every_epochs * epoch_s + checkpoint_s)
    crash_loss_s: float  # at most this much work is lost by a crash
    overhead_met: bool
    loss_met: bool
    reason: str


def checkpoint_interval(epoch_s: float, checkpoint_s: float, *,
                        max_overhead: float = DEFAULT_MAX_OVERHEAD,
                        max_loss_s: float = DEFAULT_MAX_LOSS_S) -> CheckpointPlan:
    """The periodic checkpoint interval, in epochs, for the measured costs."""
    if not (epoch_s > 0 and checkpoint_s >= 0 and 0 < max_overhead < 1 and max_loss_s > 0):
        raise ValueError("epoch_s > 0, checkpoint_s >= 0, 0 < max_overhead < 1, max_loss_s > 0")
    need = math.ceil(checkpoint_s * (1 - max_overhead) / (max_overhead * epoch_s) - 1e-9)
    cheapest = max(1, need)
    allowed = math.floor((max_loss_s - checkpoint_s) / epoch_s + 1e-9)
    if cheapest <= allowed:
        every, why = cheapest, "the smallest interval within the overhead budget"
    elif allowed >= 1:
        every, why = allowed, "the crash-loss bound wins over the overhead budget"
    else:
        every, why = 1, "one epoch is longer than the crash-loss bound: every epoch"
    overhead = checkpoint_s / (every * epoch_s + checkpoint_s) if checkpoint_s else 0.0
    loss = every * epoch_s + checkpoint_s
    return CheckpointPlan(every, overhead, loss, overhead <= max_overhead + 1e-12,
                          loss <= max_loss_s + 1e-9, why)


def should_checkpoint(epochs_done: int, plan: CheckpointPlan, *, stopping: bool,
                      segment_end: bool) -> bool:
    """After epoch `epochs_done`: always when the segment stops (preempted, cancelled, its
    last epoch, the job's last); otherwise every `plan.every_epochs`."""
    return stopping or segment_end or epochs_done % plan.every_epochs == 0

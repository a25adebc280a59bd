"""Gradient accumulation that never crosses an epoch boundary.

ultralytics steps the optimizer when `ni - last_opt_step >= accumulate`, with
`last_opt_step` a local of its training loop that restarts at -1 in every
process: a resumed run would step on a different schedule whenever
`nbs / batch > 1`. yoloq takes the decision over: the loop is told to call
`optimizer_step` on every batch, and this policy decides whether it really steps.
Within an epoch it follows ultralytics (including the warmup ramp); at an epoch's
last batch it always steps, so nothing is pending at a boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AccumulationPolicy:
    nominal: int  # ultralytics' accumulate: round(nbs / batch), capped
    warmup_iterations: int  # ultralytics' nw
    batches_per_epoch: int  # nb

    def target(self, ni: int) -> int:
        """Batches to accumulate before a step at global batch index `ni` (ultralytics' ramp)."""
        if self.warmup_iterations and ni <= self.warmup_iterations:
            ramp = np.interp(ni, [0, self.warmup_iterations], [1, self.nominal])
            return max(1, int(ramp.round()))  # exactly ultralytics' expression
        return self.nominal

    def should_step(self, epoch: int, batch_index: int, pending: int) -> bool:
        """Step after batch `batch_index` of `epoch` with `pending` batches accumulated (this one included)?"""
        if batch_index >= self.batches_per_epoch - 1:
            return True
        return pending >= self.target(epoch * self.batches_per_epoch + batch_index)

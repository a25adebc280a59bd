"""The segment's preemption context: asked after each epoch's checkpoint.

Shaped after Determined's `should_preempt()`: the Prefect-backed context reads
the flow run's `yoloq.preempt` label (a preemption), its `yoloq.drain` label (`yoloq down`
stopping the stack: `work_pools.drain`) and a user's cancel; runs outside a worker use the
in-memory one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from uuid import UUID

from work_pools.drain import CHECKPOINT_S_LABEL, DRAIN_LABEL, EPOCH_S_LABEL, TRAINED_LABEL
from yoloq.domain.contract import CHECKPOINT_AT_LABEL, EPOCH_LABEL, PREEMPT_LABEL, PREEMPT_REQUESTED


@dataclass
class InMemoryPreemption:
    """For tests and local runs: preempt after a given epoch, or never."""

    after_epoch: int | None = None
    asked: list[int] = field(default_factory=list)
    cancelled: bool = False
    drained: bool = False

    def should_preempt(self, epoch: int) -> bool:
        self.asked.append(epoch)
        return self.after_epoch is not None and epoch >= self.after_epoch


@dataclass
class FlowRunPreemption:
    """Reads this segment's flow run: a preemption label, a drain label, or a user's cancel
    (Cancelling). Each stops the segment at the epoch boundary just reached, checkpoint kept.
    """

    flow_run_id: UUID
    requested_at: float | None = None
    cancelled: bool = False
    drained: bool = False

    def should_preempt(self, epoch: int) -> bool:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(self.flow_run_id)
        labels = run.labels or {}
        self.cancelled = bool(run.state and run.state.is_cancelling())
        self.drained = labels.get(DRAIN_LABEL) == PREEMPT_REQUESTED
        wanted = labels.get(PREEMPT_LABEL) == PREEMPT_REQUESTED or self.cancelled or self.drained
        if wanted and self.requested_at is None:
            self.requested_at = time.time()
        return wanted


def publish_progress(epoch: int, upload_s: float | None = None) -> None:
    """Record the epoch just checkpointed on this segment's flow run (for the worker and CLI),
    and how long its upload took (a drain's bound)."""
    _label({EPOCH_LABEL: str(epoch), CHECKPOINT_AT_LABEL: f"{time.time():.3f}",
            **({CHECKPOINT_S_LABEL: f"{upload_s:.2f}"} if upload_s is not None else {})})


def publish_trained(epoch: int, epoch_s: float) -> None:
    """Record an epoch trained (checkpointed or not) and its duration: what a hard stop of
    `yoloq down` retrains, and a drain's bound (one epoch plus its checkpoint)."""
    _label({TRAINED_LABEL: str(epoch), EPOCH_S_LABEL: f"{epoch_s:.2f}"})


def _label(labels: dict[str, str]) -> None:
    import os

    from prefect.client.orchestration import get_client

    flow_run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not flow_run_id:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run_labels(UUID(flow_run_id), labels)

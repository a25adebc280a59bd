"""The segment's preemption context: asked after each epoch's checkpoint.

Shaped after Determined's `should_preempt()`: the Prefect-backed context reads
the flow run's `yoloq.preempt` label; runs outside a worker use the in-memory one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from uuid import UUID

from yoloq.base.stores import PREEMPT_LABEL


@dataclass
class InMemoryPreemption:
    """For tests and local runs: preempt after a given epoch, or never."""

    after_epoch: int | None = None
    asked: list[int] = field(default_factory=list)
    cancelled: bool = False

    def should_preempt(self, epoch: int) -> bool:
        self.asked.append(epoch)
        return self.after_epoch is not None and epoch >= self.after_epoch


@dataclass
class FlowRunPreemption:
    """Reads this segment's flow run: a preemption label, or a user's cancel (Cancelling).

    Both stop the segment at the epoch boundary just reached, checkpoint kept.
    """

    flow_run_id: UUID
    requested_at: float | None = None
    cancelled: bool = False

    def should_preempt(self, epoch: int) -> bool:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(self.flow_run_id)
        self.cancelled = bool(run.state and run.state.is_cancelling())
        wanted = (run.labels or {}).get(PREEMPT_LABEL) == "requested" or self.cancelled
        if wanted and self.requested_at is None:
            self.requested_at = time.time()
        return wanted


def request_preemption(flow_run_id: UUID, by_job: str, reason: str) -> None:
    """Mark a running segment to stop at its next epoch boundary (used by the worker)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.update_flow_run_labels(flow_run_id, {
            PREEMPT_LABEL: "requested",
            "yoloq.preempted_by": by_job,
            "yoloq.preempt_reason": reason[:200],
        })


def publish_progress(epoch: int) -> None:
    """Record the epoch just checkpointed on this segment's flow run (for the worker and CLI)."""
    import os

    from prefect.client.orchestration import get_client

    flow_run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not flow_run_id:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run_labels(UUID(flow_run_id), {
            "yoloq.epoch": str(epoch), "yoloq.checkpoint_at": f"{time.time():.3f}"})

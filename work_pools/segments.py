"""What the worker knows about segments, read from Prefect flow runs.

A segment's parameters carry its `plan` (`yoloq.domain.contract.SegmentPlan`: team, tier,
class, memory and epoch estimates), set by the parent flow; its labels carry live progress
(`contract.EPOCH_LABEL`, `contract.CHECKPOINT_AT_LABEL`) and preemption requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from yoloq.domain.contract import (CHECKPOINT_AT_LABEL, EPOCH_LABEL, PREEMPTED_BY_LABEL,  # noqa: F401
                                   TIER_LABEL, SegmentPlan, plan_of)
from yoloq.domain.tiers import Tier


@dataclass(frozen=True)
class SegmentView:
    flow_run_id: UUID
    name: str
    job_id: str
    team: str
    tier: Tier
    job_class: str
    est_mem_gb: float
    est_epoch_s: float
    epochs: int
    epochs_done: int
    stop_after_epoch: int
    queued_at: float
    labels: dict[str, str]
    submitted_at: float | None = None  # when the job (not this segment) was submitted
    batch: int = 16  # the batch it trains at (a resumed job: its checkpoint's)
    fixed_mem_gb: float = 0.0  # memory model: fixed + batch x per image (reduced-batch rule)
    mem_per_image_gb: float = 0.0

    @property
    def checkpoint_at(self) -> float | None:
        value = self.labels.get(CHECKPOINT_AT_LABEL)
        return float(value) if value else None

    @property
    def progress_epoch(self) -> int:
        return int(self.labels.get(EPOCH_LABEL, self.epochs_done))


def segment_view(flow_run: Any) -> SegmentView:
    """Build a view from a Prefect FlowRun of the `train-segment` deployment."""
    params: dict[str, Any] = flow_run.parameters or {}
    plan = plan_of(flow_run)
    spec: dict[str, Any] = params.get("spec") or {}
    queued = flow_run.expected_start_time or flow_run.created
    return SegmentView(
        flow_run_id=flow_run.id,
        name=flow_run.name,
        job_id=segment_job_id(flow_run),
        team=str(plan.team or spec.get("team") or "default"),
        tier=Tier.parse((flow_run.labels or {}).get(TIER_LABEL) or plan.tier
                        or spec.get("priority") or "normal"),
        job_class=plan.job_class,
        est_mem_gb=plan.est_mem_gb,
        est_epoch_s=plan.est_epoch_s,
        epochs=int(plan.epochs or spec.get("epochs") or 1),
        epochs_done=plan.epochs_done,
        stop_after_epoch=int(params.get("stop_after_epoch") or 0),
        queued_at=_ts(queued),
        labels={k: str(v) for k, v in (flow_run.labels or {}).items()},
        submitted_at=plan.submitted_at or None,
        batch=int(plan.batch or spec.get("batch") or 16),
        fixed_mem_gb=plan.fixed_mem_gb,
        mem_per_image_gb=plan.mem_per_image_gb,
    )


def segment_job_id(flow_run: Any) -> str:
    """The job a segment run belongs to (what `segment_view(run).job_id` reads), alone."""
    return str((flow_run.parameters or {}).get("job_id", flow_run.name))


def segment_plan(job: Any, analysis: dict[str, Any], epochs_done: int,
                 submitted_at: float | None) -> SegmentPlan:
    """What the scheduler needs to place a segment of `job` (a JobSpec) without reading anything
    else. The parent writes it on each segment; submit's announcement and the API's provisional
    ETA build the first one ahead of the parent."""
    return SegmentPlan.from_dict({
        "team": job.team, "tier": job.priority, "job_class": analysis.get("job_class", "full"),
        "est_mem_gb": analysis.get("est_gpu_mem_gb", 0.0),
        "est_epoch_s": analysis.get("est_epoch_s", 0.0),
        "epochs": job.epochs, "epochs_done": epochs_done, "submitted_at": submitted_at,
        **memory_plan(analysis),
    })


def memory_plan(analysis: dict[str, Any]) -> dict[str, Any]:
    """The memory model the scheduler needs to offer a reduced batch: fixed GB, GB per image
    and the batch (from the analysis; the same estimate `yoloq analyse` prints)."""
    from yoloq.analysis.estimates import activation_gb_per_image, peak_memory_gb

    params, gflops = float(analysis.get("params_m") or 0.0), float(analysis.get("gflops") or 0.0)
    imgsz, amp = int(analysis.get("imgsz") or 640), bool(analysis.get("amp", True))
    return {"batch": int(analysis.get("batch") or 16),
            "fixed_mem_gb": round(peak_memory_gb(params, gflops, imgsz, 0, amp), 4),
            "mem_per_image_gb": round(activation_gb_per_image(gflops, imgsz, amp), 6)}


def _ts(value: datetime | None) -> float:
    return value.timestamp() if value else 0.0

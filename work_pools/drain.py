"""`yoloq down`'s drain: the request `down` leaves for the node agent, the bound the agent
waits, and the report it leaves for `down` to print.

`down` writes `<state>/drain/request.json`, then stops the node agent (SIGTERM) while the
Prefect server is still up. An agent that finds a request written after it started drains
before it stops: it releases the scheduler lease, labels its running segments
`yoloq.drain=requested` (a segment checks that label after every epoch, as it checks a
preemption request, uploads a checkpoint at that boundary whatever its periodic interval,
and ends in a `Cancelled` state named `Drained`), waits for each within its bound, stops
the rest hard, and writes `<state>/drain/report.json`.

A drain is not a preemption: no `yoloq.preempt` label, no `Preempted` state, so no view
counts it as one.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from yoloq.domain.contract import (CHECKPOINT_S_LABEL, DRAIN_ASKED_AT_LABEL, DRAIN_LABEL,  # noqa: F401
                                   DRAIN_REASON_LABEL, EPOCH_S_LABEL, TRAINED_LABEL)

DRAINED = "Drained"  # the state name a drained segment ends in (a Cancelled type)
MARGIN_S = 10.0  # beyond one epoch and its checkpoint: the label read and the process exit
REASON = "stack stopping (yoloq down)"


@dataclass(frozen=True)
class DrainRequest:
    timeout_s: float | None  # None: each segment's own bound (one epoch plus its checkpoint)
    requested_at: float
    reason: str = REASON


def request_path(root: Path) -> Path:
    return Path(root) / "drain" / "request.json"


def report_path(root: Path) -> Path:
    return Path(root) / "drain" / "report.json"


def write_request(root: Path, timeout_s: float | None) -> DrainRequest:
    request = DrainRequest(timeout_s=timeout_s, requested_at=time.time())
    path = request_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    report_path(root).unlink(missing_ok=True)
    deadline_path(root).unlink(missing_ok=True)
    path.write_text(json.dumps(asdict(request)))
    return request


def take_request(root: Path, since: float) -> DrainRequest | None:
    """The drain request written after `since` (this agent's start), removed once read; None
    when there is none (a plain stop: segments are stopped at once, as before)."""
    path = request_path(root)
    try:
        data = json.loads(path.read_text())
        path.unlink(missing_ok=True)
    except (OSError, ValueError):
        return None
    if float(data.get("requested_at") or 0) < since:
        return None
    timeout = data.get("timeout_s")
    return DrainRequest(timeout_s=None if timeout is None else float(timeout),
                        requested_at=float(data["requested_at"]),
                        reason=str(data.get("reason") or REASON))


def deadline_path(root: Path) -> Path:
    return Path(root) / "drain" / "deadline"


def write_deadline(root: Path, deadline: float) -> None:
    """When the agent stops waiting for its segments (`down` waits that long, plus a grace)."""
    deadline_path(root).parent.mkdir(parents=True, exist_ok=True)
    deadline_path(root).write_text(f"{deadline:.3f}")


def read_deadline(root: Path, since: float) -> float | None:
    try:
        path = deadline_path(root)
        return float(path.read_text()) if path.stat().st_mtime >= since else None
    except (OSError, ValueError):
        return None


def bound_s(epoch_s: float, checkpoint_s: float | None) -> float:
    """How long a segment may take to reach its next epoch boundary and upload there."""
    return epoch_s + (checkpoint_s or 0.0) + MARGIN_S


@dataclass(frozen=True)
class Outcome:
    """What the drain did to one segment."""

    job_id: str
    segment: str
    drained: bool  # stopped at an epoch boundary with a checkpoint (or ended by itself)
    checkpoint_epoch: int  # the epoch its newest checkpoint holds: the job resumes there
    state: str = DRAINED
    retrain_from: int | None = None  # a hard stop: these epochs are trained again
    retrain_to: int | None = None

    def line(self) -> str:
        if self.drained and self.state == DRAINED:
            return (f"job {self.job_id}: drained at epoch {self.checkpoint_epoch} (checkpoint "
                    f"saved); it resumes from epoch {self.checkpoint_epoch} after `yoloq up`")
        if self.drained:
            return (f"job {self.job_id}: segment {self.segment} ended {self.state} during the "
                    f"drain (checkpoint epoch {self.checkpoint_epoch})")
        if self.retrain_from is None:
            return (f"job {self.job_id}: stopped hard (no epoch boundary within the drain "
                    f"wait); every epoch is checkpointed (epoch {self.checkpoint_epoch}), "
                    "nothing is retrained")
        span = (f"epoch {self.retrain_from}" if self.retrain_from == self.retrain_to
                else f"epochs {self.retrain_from}-{self.retrain_to}")
        return (f"job {self.job_id}: stopped hard (no epoch boundary within the drain wait); "
                f"its last checkpoint holds epoch {self.checkpoint_epoch}, so {span} will be "
                "retrained")


def retrained(checkpoint_epoch: int, trained: int, stop_after: int) -> tuple[int, int] | None:
    """Epochs a hard stop loses: those trained since the checkpoint and the one in progress."""
    last = min(max(trained + 1, checkpoint_epoch + 1), stop_after)
    return (checkpoint_epoch + 1, last) if last > checkpoint_epoch else None


def write_report(root: Path, outcomes: list[Outcome], waited_s: float) -> None:
    path = report_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"waited_s": round(waited_s, 2), "at": time.time(),
                                "segments": [asdict(o) for o in outcomes]}))


def read_report(root: Path, since: float) -> dict[str, Any] | None:
    """The report the agent wrote after `since`, or None (no agent drained)."""
    try:
        data = json.loads(report_path(root).read_text())
    except (OSError, ValueError):
        return None
    return data if float(data.get("at") or 0) >= since else None


def report_lines(report: dict[str, Any]) -> list[str]:
    outcomes = [Outcome(**o) for o in report.get("segments") or []]
    if not outcomes:
        return ["drain: no segment was running"]
    return [o.line() for o in outcomes] + [f"drain took {report.get('waited_s', 0):.1f} s"]

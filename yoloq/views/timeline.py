"""A job's timeline: queued, started, preempted by whom at which epoch, resumed, finished,
and one `trained` row per epoch training from the job's epoch ledger (a retrained epoch
shows twice, marked as a repeat)."""

from __future__ import annotations

import re
from typing import Any

from yoloq.domain.contract import (BATCH_LABEL, EPOCH_LABEL, GPU_NAME_LABEL, GPUS_LABEL, NODE_LABEL,
                                   PREEMPT_REASON_LABEL, PREEMPTED, PREEMPTED_BY_LABEL, final_state,
                                   start_epoch)


def job_timeline(client: Any, job_id: str) -> list[dict[str, Any]]:
    from yoloq.records.jobs import list_jobs

    jobs = list_jobs(client, job_id)
    if not jobs:
        return []
    job = jobs[0]
    rows: list[dict[str, Any]] = [_at(job.flow_run.created, "submitted",
                                      f"team {job.team}, tier {job.submitted_tier or job.tier}, {job.epochs} epochs")]
    for i, seg in enumerate(job.segments):
        params = seg.parameters or {}
        first = start_epoch(seg)
        target = params.get("stop_after_epoch")
        rows.append(_at(seg.created, "queued", f"{seg.name}: epochs {first}->{target}"))
        if seg.start_time:
            verb = "resumed" if i > 0 else "started"
            rows.append(_at(seg.start_time, verb, f"{seg.name} from epoch {first}"
                                                  f"{_placement(seg.labels or {})}"))
        rows.extend(_ending(seg))
    rows.extend(ledger_rows(job_id, {str(seg.id): seg.name for seg in job.segments}))
    if job.flow_run.state and job.flow_run.state.is_final():
        rows.append(_at(job.flow_run.end_time or job.flow_run.state.timestamp,
                        job.flow_run.state.name.lower(), job.flow_run.state.message or ""))
    return sorted(rows, key=lambda r: r["time"])


def _placement(labels: dict[str, Any]) -> str:
    """" on node a GPU 0 (A100), batch 282 (reduced to fit)": where the scheduler put it."""
    if not labels.get(NODE_LABEL):
        return ""
    text = f" on node {labels[NODE_LABEL]} GPU {labels.get(GPUS_LABEL, '?')}"
    if labels.get(GPU_NAME_LABEL):
        text += f" ({labels[GPU_NAME_LABEL]})"
    if labels.get(BATCH_LABEL):
        text += f", batch {labels[BATCH_LABEL]} (reduced to fit)"
    return text


def _ending(seg: Any) -> list[dict[str, Any]]:
    outcome = final_state(seg)
    if outcome is None:
        return []
    state = seg.state
    when = seg.end_time or state.timestamp
    if outcome == PREEMPTED:  # a victim killed after its grace too (`contract.was_preempted`)
        return [_at(when, "preempted", preempted_detail(seg.labels or {}))]
    return [_at(when, outcome.lower(), f"{seg.name}: {state.message or ''}".strip())]


_EPOCH_CLAIM = re.compile(r" at epoch \d+")


def preempted_detail(labels: dict[str, Any]) -> str:
    """"by JOB at epoch N: why", N being the epoch the job resumes after: the segment's last
    checkpoint (`yoloq.epoch`, written at the boundary where it stopped, as its own log says).
    The scheduler's reason was written when it asked, from the checkpoint it knew then (with
    periodic checkpoints, epochs before the stop): its epoch is left out, so one number is shown."""
    by = labels.get(PREEMPTED_BY_LABEL, "?")
    why = without_epoch_claim(labels.get(PREEMPT_REASON_LABEL, ""))
    return f"by {by} at epoch {labels.get(EPOCH_LABEL, '?')}" + (f": {why}" if why else "")


def without_epoch_claim(reason: str) -> str:
    """A scheduler reason without its " at epoch N" (the epoch it expected the stop at)."""
    return _EPOCH_CLAIM.sub("", reason)


def _at(when: Any, what: str, detail: str) -> dict[str, Any]:
    return {"time": when.isoformat() if when else "", "what": what, "detail": detail}


def ledger_rows(job_id: str, segment_names: dict[str, str]) -> list[dict[str, Any]]:
    """`trained` rows from the epoch ledger in the job's checkpoint metadata."""
    from yoloq.records.jobs import epoch_trainings

    try:
        records = epoch_trainings(job_id)
    except Exception as exc:  # shown, not hidden: the rest of the timeline is still useful
        return [{"time": "", "what": "ledger unavailable",
                 "detail": f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}]
    rows, seen = [], {}
    for record in records:
        seen[record.epoch] = seen.get(record.epoch, 0) + 1
        again = f", trained {seen[record.epoch]} times" if seen[record.epoch] > 1 else ""
        segment = segment_names.get(record.segment, record.segment)
        rows.append({"time": record.end, "what": "trained",
                     "detail": f"epoch {record.epoch} by {segment} on {record.node}{again}",
                     "epoch": record.epoch, "segment": record.segment, "node": record.node,
                     "start": record.start, "end": record.end})
    return rows

"""A job's timeline: queued, started, preempted by whom at which epoch, resumed, finished,
and one `trained` row per epoch training from the job's epoch ledger (a retrained epoch
shows twice, marked as a repeat)."""

from __future__ import annotations

import re
from typing import Any


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
        start_epoch = (params.get("plan") or {}).get("epochs_done", 0)
        target = params.get("stop_after_epoch")
        rows.append(_at(seg.created, "queued", f"{seg.name}: epochs {start_epoch}->{target}"))
        if seg.start_time:
            verb = "resumed" if i > 0 else "started"
            rows.append(_at(seg.start_time, verb, f"{seg.name} from epoch {start_epoch}"
                                                  f"{_placement(seg.labels or {})}"))
        rows.extend(_ending(seg))
    rows.extend(ledger_rows(job_id, {str(seg.id): seg.name for seg in job.segments}))
    if job.flow_run.state and job.flow_run.state.is_final():
        rows.append(_at(job.flow_run.end_time or job.flow_run.state.timestamp,
                        job.flow_run.state.name.lower(), job.flow_run.state.message or ""))
    return sorted(rows, key=lambda r: r["time"])


def _placement(labels: dict[str, Any]) -> str:
    """" on node a GPU 0 (A100), batch 282 (reduced to fit)": where the scheduler put it."""
    if not labels.get("yoloq.node"):
        return ""
    text = f" on node {labels['yoloq.node']} GPU {labels.get('yoloq.gpus', '?')}"
    if labels.get("yoloq.gpu_name"):
        text += f" ({labels['yoloq.gpu_name']})"
    if labels.get("yoloq.batch"):
        text += f", batch {labels['yoloq.batch']} (reduced to fit)"
    return text


def _ending(seg: Any) -> list[dict[str, Any]]:
    state = seg.state
    if not state or not state.is_final():
        return []
    labels = seg.labels or {}
    when = seg.end_time or state.timestamp
    killed_victim = state.is_crashed() and labels.get("yoloq.preempt") == "requested"
    if state.name == "Preempted" or killed_victim:
        return [_at(when, "preempted", preempted_detail(labels))]
    return [_at(when, state.name.lower(), f"{seg.name}: {state.message or ''}".strip())]


_EPOCH_CLAIM = re.compile(r" at epoch \d+")


def preempted_detail(labels: dict[str, Any]) -> str:
    """"by JOB at epoch N: why", N being the epoch the job resumes after: the segment's last
    checkpoint (`yoloq.epoch`, written at the boundary where it stopped, as its own log says).
    The scheduler's reason was written when it asked, from the checkpoint it knew then (with
    periodic checkpoints, epochs before the stop): its epoch is left out, so one number is shown."""
    by = labels.get("yoloq.preempted_by", "?")
    why = without_epoch_claim(labels.get("yoloq.preempt_reason", ""))
    return f"by {by} at epoch {labels.get('yoloq.epoch', '?')}" + (f": {why}" if why else "")


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

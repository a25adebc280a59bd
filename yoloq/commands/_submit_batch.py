"""What a `yoloq submit` batch is made of, and how its outcome is told: shared by the local
command and its remote path (`_remote_submit`), which both sit above this module."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from yoloq.commands._client import print_json
from yoloq.base.errors import UserError

_NAMED_IN_ERROR = 5  # bad jobs named, after the first, in the one error line


@dataclass
class Job:
    """One job of the batch, as it goes through analysis, checks and creation."""

    source: str
    spec: Any = None
    analysis: Any = None
    error: UserError | None = None
    point: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None


def stop_if_bad(jobs: list[Job], keep_going: bool, single: bool) -> None:
    bad = [job for job in jobs if job.error is not None]
    if bad and (not keep_going or len(bad) == len(jobs)):
        raise batch_error(bad, single, created=0)


def batch_error(bad: list[Job], single: bool, created: int) -> UserError:
    """One line: the first bad job in full, then the file and field of the others."""
    first = bad[0].error
    assert first is not None
    if single:
        return first
    others = ", ".join(f"{job.source} ({job.error.field})" for job in bad[1:1 + _NAMED_IN_ERROR]
                       if job.error is not None)
    more = len(bad) - 1 - _NAMED_IN_ERROR
    tail = f"; {len(bad) - 1} more bad: {others}" + (f" and {more} others" if more > 0 else "") if others else ""
    outcome = f"{created} other jobs created" if created else "nothing created"
    fix = f"{first.fix}; " if first.fix else ""
    return UserError(bad[0].source, f"{first.field}: {first.problem}{tail}",
                     f"{fix}{outcome}; fix the specs and submit again")


def print_job(job: Job, as_json: bool, dry_run: bool, single: bool) -> None:
    spec, analysis = job.spec, job.analysis
    if as_json:
        obj: dict[str, Any] = {"source": job.source, "name": spec.name, **(job.result or {})}
        if dry_run:
            obj.update(dry_run=True, spec=spec.model_dump())
        if job.point:
            obj["grid"] = job.point
        obj["analysis"] = analysis.to_dict()
        if single:
            print_json(obj)
        else:
            print(json.dumps(obj, default=str), flush=True)
        return
    what = (f"({spec.team}, {spec.priority}, {analysis.job_class}, queue {analysis.queue})")
    if dry_run:
        print(f"would submit {spec.name} {what} from {job.source}", flush=True)
    elif single:
        job_id = job.result["job_id"]
        print(f"submitted {job_id} {what}; follow it with `yoloq status {job_id}`", flush=True)
    else:
        print(f"submitted {job.result['job_id']} {what} from {job.source}", flush=True)

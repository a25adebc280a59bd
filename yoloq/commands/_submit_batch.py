"""How a `yoloq submit` batch's outcome is told: shared by the local command and its remote path
(`_remote_submit`). What a batch is made of (`Job`, its one error line) is the service layer's
(`yoloq.service.submission`)."""

from __future__ import annotations

import json
from typing import Any

from yoloq.commands._client import print_json
from yoloq.service.submission import Job, batch_error, stop_if_bad

__all__ = ["Job", "batch_error", "print_job", "stop_if_bad"]


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

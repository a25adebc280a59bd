"""`yoloq submit` through a yoloq server (or, for one job, through this host's own stack API as its
local operator, `yoloq.client.local_stack`): the specs and sweeps are read and checked here, then
each job is `POST /v1/jobs`; the server analyses it (its dataset path is the server's), checks
the team and its tier cap, and creates it. The output is the local command's, line for line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from yoloq.base.errors import UserError


class RemoteAnalysis(dict):
    """The analysis the server returned, read like the local `Analysis` by the printer."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


def submit_remote(args: argparse.Namespace, remote: Any, jobs: list[Any]) -> int:
    """Post the planned jobs one by one; prints what the local command prints, notes included."""
    from yoloq.commands._submit_batch import batch_error, print_job, stop_if_bad

    single = len(jobs) == 1
    stop_if_bad(jobs, args.keep_going, single)
    if args.gpu:
        print(f"note: --gpu {args.gpu} is not used: the server checks the fit against its live nodes",
              file=sys.stderr)
    with remote:
        for job in (j for j in jobs if j.error is None):
            _post(remote, job)
            if job.result is not None:
                print_job(job, args.json, dry_run=False, single=single)
            elif not args.keep_going:
                break
    for note in dict.fromkeys(n for job in jobs if job.result for n in job.result["notes"]):
        print(f"note: {note}", file=sys.stderr)
    bad = [job for job in jobs if job.error is not None]
    created = sum(1 for job in jobs if job.result)
    if bad:
        raise batch_error(bad, single, created=created)
    if not single and not args.json:
        print(f"submitted {created} jobs; follow them with `yoloq queue`")
    return 0


def _post(remote: Any, job: Any) -> None:
    """Create one job on the server; a refusal becomes the job's error."""
    try:
        answer = remote.post("/jobs", job.spec.model_dump(mode="json"))
    except UserError as exc:
        job.error = exc
        return
    job.analysis = RemoteAnalysis(answer.get("analysis") or {})
    job.result = {"job_id": answer["job_id"], "fit": answer.get("fit"), "notes": answer.get("notes", []),
                  "position": answer.get("position"), "eta": answer.get("eta")}

"""`yoloq logs JOB [--follow] [--json]`: the job's training log (its parent and segment runs'
Prefect logs, in time order), from this host's stack or the configured yoloq server."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from yoloq.commands._client import backend
from yoloq.base.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job id")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new lines until the job ends (Ctrl-C stops)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between reads with --follow")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def run(args: argparse.Namespace) -> int:
    from yoloq.views.joblogs import follow, format_line

    if args.interval <= 0:
        raise UserError("--interval", "must be positive", "e.g. --interval 2")
    with backend() as where:
        fetch = _remote_fetch(where.remote, args.job) if where.remote else _local_fetch(where.client, args.job)
        try:
            for line in follow(fetch, args.interval, follow_on=args.follow):
                print(json.dumps(line) if args.json else format_line(line), flush=True)
        except KeyboardInterrupt:
            return 0
    return 0


def _local_fetch(client: Any, job_id: str):
    from yoloq.views.joblogs import job_log

    def fetch(after: datetime | None) -> dict[str, Any]:
        page = job_log(client, job_id, after)
        if page is None:
            raise UserError("job", f"no job named {job_id!r}", "list jobs with `yoloq status`")
        return page

    return fetch


def _remote_fetch(remote: Any, job_id: str):
    def fetch(after: datetime | None) -> dict[str, Any]:
        return remote.get(f"/jobs/{job_id}/logs", after=after.isoformat() if after else None)

    return fetch

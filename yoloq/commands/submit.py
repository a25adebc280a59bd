"""`yoloq submit SPEC [SPEC ...] [key=value ...] [--json] [--gpu NAME] [--dry-run] [--keep-going]`:
admit every job (`yoloq.service.admission.admit`: the analysis, the team's tier cap, the fit on
the pool; the verdict `yoloq analyse` shows), then create the jobs' `yolo-job` runs: all in this
one process, through one Prefect client (`yoloq.service.submission`). One job on the host
of a running stack goes instead to the stack's warm API as its local operator (same checks, same
output, no Prefect import: `yoloq.client.local_stack`).

A SPEC is a job spec or a sweep file (a base spec and a `grid`, see `yoloq.sweep`); `key=value`
overrides apply to every job, the way `yolo train key=value` does. Every job is analysed and
checked before any is created: one bad job stops the batch with nothing created (exit 2, one
line naming the file and field, and the others that are bad), unless `--keep-going`, which
creates the good ones and still exits 2.
"""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._submit_batch import print_job
from yoloq.service.admission import check_tier_cap, live_nodes
from yoloq.service.submission import (
    Job,
    analyse_job,
    batch_error,
    create_job_run,
    job_deployment_id,
    job_tags,
    stop_if_bad,
    submit_batch,
    submit_job,
)

# The service layer's names, kept here for the scripts and benches that import them from the command.
__all__ = ["Job", "add_arguments", "analyse_job", "check_tier_cap", "create_job_run", "job_deployment_id",
           "job_tags", "live_nodes", "run", "submit_batch", "submit_job"]


class _Intermixed:
    """Options and positionals in any order (`yoloq submit sweep.yaml --dry-run lr0=0.1`): argparse's
    intermixed parsing for this command's parser, which has no subcommands of its own."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inner:  # argparse's own passes inside parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.__class__ = type("SubmitParser", (_Intermixed, type(parser)), {})
    parser.add_argument("items", nargs="+", metavar="SPEC|key=value",
                        help="job specs and sweep files (a sweep has a `grid` key), and key=value overrides "
                             "for all of them (`epochs=5`, `lr0=0.01` goes under train_args)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per job (one per line)")
    parser.add_argument("--gpu", help="GPU type for the estimates; the fit is checked against it only "
                        "while the pool has no live node")
    parser.add_argument("--dry-run", action="store_true",
                        help="analyse and print the jobs without creating them (no stack needed; the tier "
                             "cap and the pool fit are not checked)")
    parser.add_argument("--keep-going", action="store_true",
                        help="create the good jobs even when some are bad (still exit 2)")


def run(args: argparse.Namespace) -> int:
    from yoloq.domain import sweep
    from yoloq.client.remote import remote
    from yoloq.commands._remote_submit import submit_remote

    paths, overrides = sweep.split_items(args.items)
    jobs = [Job(p.source, spec=p.spec, error=p.error, point=p.point) for p in sweep.plan(paths, overrides)]
    server = None if args.dry_run else remote()
    if server is not None:  # a yoloq server is configured: it analyses, checks and creates
        return submit_remote(args, server, jobs)
    if not args.dry_run and not args.gpu and len(jobs) == 1 and jobs[0].error is None:
        from yoloq.commands._client import local_api

        local = local_api()  # one job: this host's warm API analyses and creates it, no Prefect import
        if local is not None:
            return submit_remote(args, local, jobs)
    for job in jobs:
        analyse_job(job, args.gpu)
    single = len(jobs) == 1
    stop_if_bad(jobs, args.keep_going, single)
    good = [job for job in jobs if job.error is None]
    if args.dry_run:
        for job in good:
            print_job(job, args.json, dry_run=True, single=single)
    else:
        notes = submit_batch(good, args.gpu, args.keep_going, echo=lambda job: print_job(
            job, args.json, dry_run=False, single=single))
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    bad = [job for job in jobs if job.error is not None]
    if bad:  # --keep-going: the good ones went through; say which did not
        raise batch_error(bad, single, created=sum(1 for job in jobs if job.result) if not args.dry_run else 0)
    if not single and not args.json:
        verb = "would submit" if args.dry_run else "submitted"
        print(f"{verb} {len(good)} jobs" + ("" if args.dry_run else "; follow them with `yoloq queue`"))
    return 0

"""`yoloq demo`: three teams, three tiers, one declared slot, live progress."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from yoloq.views.table import Column, render

DEMO_JOBS = (
    # name, team, tier, epochs, segment epochs: the low job starts first and holds the only
    # slot; the urgent one preempts it at an epoch boundary; the normal one waits its turn.
    ("nightly-baseline", "platform", "low", 8, 8),
    ("shapes-tuning", "research", "normal", 2, 2),
    ("hotfix-detector", "vision", "urgent", 2, 2),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    parser.add_argument("--keep-running", action="store_true", help="leave the stack up afterwards")
    parser.add_argument("--json", action="store_true",
                        help="progress on stderr; print the jobs' final state as one JSON object")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("YOLOQ_DECLARED_GPUS", "1xCPU:8")
    os.environ.setdefault("YOLOQ_MIN_RUNTIME_S", "5")
    from yoloq.commands.submit import submit_job
    from yoloq.domain.spec import load_spec
    from yoloq.ops.stack import up

    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    stack = up(echo=say)
    specs = write_demo_specs(stack.paths.root / "demo")
    job_ids = []
    for spec_path in specs:
        spec = load_spec(spec_path)
        job_ids.append(submit_job(spec)["job_id"])
        say(f"submitted {job_ids[-1]:<28} team {spec.team:<9} tier {spec.priority}")
        if spec.priority == "low":
            wait_until_training(job_ids[-1])
    ok = watch(job_ids, args.timeout, to_stderr=args.json)
    if args.json:
        _print_final(job_ids, ok, stack)
        return 0 if ok else 1
    print_where_to_look(stack, job_ids)
    if not args.keep_running:
        print("(the stack keeps running; stop it with `yoloq down`)")
    return 0 if ok else 1


def write_demo_specs(root: Path) -> list[Path]:
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(root / "shapes", train=64, val=16, imgsz=64, seed=0)
    paths = []
    for name, team, tier, epochs, per_segment in DEMO_JOBS:
        spec = {"name": name, "team": team, "priority": tier, "model": "yolov8n.yaml",
                "data": str(data), "epochs": epochs, "imgsz": 64, "batch": 8,
                "segment_epochs": per_segment,
                "export": ["torchscript"], "train_args": {"seed": 0, "deterministic": True,
                                                          "workers": 0, "plots": False}}
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        paths.append(path)
    return paths


def wait_until_training(job_id: str, timeout_s: float = 180) -> None:
    """Hold the next submissions until the first job holds the slot, so the urgent one preempts."""
    from yoloq.commands._client import stack_client
    from yoloq.records.jobs import segments_of

    deadline = time.monotonic() + timeout_s
    with stack_client() as client:
        while time.monotonic() < deadline:
            if any(s.state and s.state.is_running() for s in segments_of(client, job_id)):
                return
            time.sleep(1)


def _print_final(job_ids: list[str], ok: bool, stack) -> None:
    from yoloq.commands._client import print_json, stack_client
    from yoloq.records.jobs import list_jobs

    with stack_client() as client:
        jobs = [j.to_dict() for j in list_jobs(client) if j.job_id in job_ids]
    print_json({"completed": ok, "jobs": jobs, "ui_url": stack.ui_url, "state": str(stack.paths.root)})


def watch(job_ids: list[str], timeout_s: float, to_stderr: bool = False) -> bool:
    """A live progress display: one row per job, redrawn in place, fitted to the terminal."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from yoloq.commands._client import stack_client
    from yoloq.records.jobs import list_jobs
    from yoloq.views.queueview import queue_rows

    deadline = time.monotonic() + timeout_s
    console = Console(stderr=True) if to_stderr else None
    with stack_client() as client, Live(refresh_per_second=2, console=console) as live:
        while True:
            jobs = {j.job_id: j for j in list_jobs(client)}
            now = {row["job"]: row["reason"] for row in queue_rows(client)}
            live.update(Text(f"yoloq demo (one declared CPU slot)\n{summary(job_ids, jobs, now)}"))
            finals = [jobs[i].flow_run.state.is_final() for i in job_ids if i in jobs]
            if len(finals) == len(job_ids) and all(finals):
                return all(jobs[i].flow_run.state.is_completed() for i in job_ids)
            if time.monotonic() > deadline:
                return False
            time.sleep(1.5)


DEMO_COLUMNS = (
    Column("job", ident=True, priority=0),
    Column("state", priority=1),
    Column("epochs", priority=1),
    Column("tier", priority=2),
    Column("team", priority=3),
    Column("preempted", priority=4, right=True),
    Column("segments", priority=5, right=True),
    Column("now", priority=6, min_width=12),
)


def summary(job_ids: list[str], jobs: dict[str, Any], now: dict[str, str], width: int | None = None) -> str:
    """The demo's table: the jobs (JobRecords by id) in submission order, with what each waits for."""
    rows = []
    for job_id in job_ids:
        job = jobs.get(job_id)
        if job is None:
            continue
        bar = "#" * job.epochs_done + "." * max(0, job.epochs - job.epochs_done)
        rows.append({"job": job_id, "team": job.team, "tier": job.tier, "state": job.state,
                     "epochs": f"[{bar}] {job.epochs_done}/{job.epochs}", "segments": len(job.segments),
                     "preempted": job.preemptions, "now": now.get(job_id, "")})
    return render(rows, DEMO_COLUMNS, width=width, empty="(no jobs yet)")


def print_where_to_look(stack, job_ids: list[str]) -> None:
    print(f"\nPrefect UI:      {stack.ui_url}  (deployments, runs, events, queue board artifact)")
    print(f"MLflow store:    {stack.paths.mlflow_uri}\n"
          f"                 open it with: mlflow ui --backend-store-uri {stack.paths.mlflow_uri}")
    print(f"Exported models: {stack.paths.exports}")
    print(f"Timelines:       yoloq history {job_ids[0]}")

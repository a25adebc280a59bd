"""What waiting jobs cost the control plane: total RSS and process count with N queued jobs.

Starts a private embedded stack (`yoloq.ops.stack.private_stack`: its own state folder and port,
one declared slot `1xCPU:8`, minimum runtime 0), pauses the GPU worker (SIGSTOP of its process
group, so every segment stays Scheduled and every job waits), then submits jobs and measures,
at each checkpoint, every process of the stack (psutil: processes whose environment names this
state folder and `YOLOQ_STACK=1`): server, job runner, GPU worker and anything they started.

Jobs are submitted through the Python call that `yoloq submit` makes to create a job's run
(`create_job_run`), in this one process, without the CLI's local analysis, fit and policy
checks (each job's parent still analyses), so the submit rate is the stack's, not the CLI's
(`bench/submit.py` times those: 0.76 s a one-job CLI call on the stack's host, 2.29 s on the
Prefect path a batch takes, on this 2-core host). Each job: yolov8n.yaml, 1 epoch, 64 px, batch 4, no export, on a synthetic
8/4-image dataset. A job counts as waiting once its parent run is Running and its first segment
is Scheduled.

With `--old-at K` (default 20), the stock ProcessWorker runner (one process per parent, as
before) is measured first with K waiting jobs; then it is SIGKILLed, `yoloq up` recovers the K
parents and starts the in-process job runner, which adopts their segments (checked: still K).

    .venv/bin/python bench/queue_scale.py                      # N = 0, 20, 100, 500; old at 20
    .venv/bin/python bench/queue_scale.py --checkpoints 0,10 --old-at 5
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OLD_MARK = "YOLOQ_BENCH_OLD_RUNNER"
OLD_RUNNER = ("import asyncio\nfrom yoloq import offline\noffline.apply()\n"
              "from prefect.workers.process import ProcessWorker\n"
              "asyncio.run(ProcessWorker(work_pool_name='yoloq-jobs', name='old-process-runner').start())\n")


@dataclass(frozen=True)
class Sample:
    jobs: int
    processes: int
    rss_mb: float
    by_role: dict[str, tuple[int, float]]
    crashed: int = 0


def per_role(stack, read) -> dict[str, list[float]]:
    """`read(process)` for every process of the stack, by role (from the PID files)."""
    import psutil

    from yoloq.ops.stack import SERVICES, _read_pid

    roles = {_read_pid(stack, name): name for name in SERVICES}  # server, runner, worker, api
    by_role: dict[str, list[float]] = {}
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
            if env.get("YOLOQ_HOME") != str(stack.paths.root) or env.get("YOLOQ_STACK") != "1":
                continue
            role = "old runner" if env.get(OLD_MARK) else _role(proc, roles)
            by_role.setdefault(role, []).append(read(proc))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return by_role


def measure(stack, jobs: int, crashed: int = 0) -> Sample:
    """Every process of the stack: count and total RSS, by role."""
    by_role = per_role(stack, lambda proc: proc.memory_info().rss / 2**20)
    summary = {role: (len(v), sum(v)) for role, v in sorted(by_role.items())}
    return Sample(jobs, sum(n for n, _ in summary.values()), sum(mb for _, mb in summary.values()),
                  summary, crashed)


def measure_settled(stack, jobs: int, crashed: int) -> Sample:
    time.sleep(5)  # the last parents' first reads and the server's caches
    return measure(stack, jobs, crashed)


def _role(proc, roles: dict[int | None, str]) -> str:
    """The PID file's name, else `<name> child` for a process its service started."""
    if proc.pid in roles:
        return roles[proc.pid]
    for parent in proc.parents():
        if parent.pid in roles:
            return f"{roles[parent.pid]} child"
    return "other"


def counts(client) -> tuple[int, int, int]:
    """(parents Running, segments Scheduled, parents that ended Crashed or Failed)."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    def count(deployment: str, *states: StateType) -> int:
        return client.count_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=list(states)))),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))

    return (count("yolo-job", StateType.RUNNING), count("train-segment", StateType.SCHEDULED),
            count("yolo-job", StateType.CRASHED, StateType.FAILED))


def wait_waiting(client, submitted: int, timeout_s: float) -> tuple[int, int]:
    """Block until each of the `submitted` jobs waits (parent Running, segment Scheduled) or
    has ended Crashed/Failed (a runner that could not start it); return (waiting, ended)."""
    began = time.monotonic()
    last = (-1, -1, -1)
    while True:
        now = counts(client)
        running, scheduled, ended = now
        if now != last:
            print(f"  {time.monotonic() - began:6.1f} s: {running} parents running, "
                  f"{scheduled} segments waiting, {ended} parents crashed", flush=True)
            last = now
        if scheduled > submitted:
            raise SystemExit(f"{scheduled} segments for {submitted} jobs: a parent queued twice")
        if running + ended >= submitted and scheduled >= running:
            return running, ended  # a parent that crashed after queuing leaves its segment
        if time.monotonic() - began > timeout_s:
            raise SystemExit(f"only {now} of {submitted} jobs waiting after {timeout_s:.0f} s")
        time.sleep(2)


def wait_worker_ready(timeout_s: float = 180) -> None:
    """Until the GPU worker has published its node (so it is paused fully started)."""
    from work_pools.nodes import live_pool_gpus

    deadline = time.monotonic() + timeout_s
    while not live_pool_gpus():
        if time.monotonic() > deadline:
            raise SystemExit(f"the GPU worker published no node within {timeout_s:.0f} s")
        time.sleep(1)
    time.sleep(3)


def make_spec(data: Path, index: int):
    from yoloq.domain.spec import parse_spec

    return parse_spec({"name": f"scale{index}", "team": "vision", "priority": "normal",
                       "model": "yolov8n.yaml", "data": str(data), "epochs": 1, "imgsz": 64,
                       "batch": 4, "export": [],
                       "train_args": {"seed": 0, "deterministic": True, "workers": 0,
                                      "plots": False}})


def submit(data: Path, start: int, stop: int) -> float:
    """Submit jobs start..stop-1 (the call `yoloq submit` makes to create a job's run, without
    the CLI's analysis, fit and policy checks); return the mean seconds per submit."""
    from yoloq.base.retry import patiently
    from yoloq.commands.submit import create_job_run

    log = logging.getLogger("queue_scale")
    began = time.monotonic()
    for index in range(start, stop):  # a busy server answers 503 (the run was not created)
        patiently(lambda i=index: create_job_run(make_spec(data, i), reason="bench/queue_scale.py"),
                  "submitting a job", log)
    return (time.monotonic() - began) / max(1, stop - start)


def signal_group(pid: int | None, sig: signal.Signals) -> None:
    if pid:
        try:
            os.killpg(os.getpgid(pid), sig)
        except ProcessLookupError:
            pass


def kill_marked(root: Path) -> None:
    """SIGKILL the old runner and every process it started (they carry its mark)."""
    import psutil

    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
            if env.get(OLD_MARK) and env.get("YOLOQ_HOME") == str(root):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def measure_old(stack, data: Path, jobs: int, timeout_s: float) -> Sample:
    """The ProcessWorker runner with `jobs` submitted; afterwards the in-process runner is
    back (started by `up`, which reschedules the parents the killed runner left)."""
    from prefect.client.orchestration import get_client

    from yoloq.ops.stack import PROJECT_DIR, _read_pid, stack_env, up

    signal_group(_read_pid(stack, "runner"), signal.SIGKILL)  # idle: it runs nothing yet
    env = {**stack_env(stack), "YOLOQ_STACK": "1", OLD_MARK: "1"}
    with open(stack.paths.logs / "old-runner.log", "ab") as log:
        subprocess.Popen([sys.executable, "-c", OLD_RUNNER], cwd=PROJECT_DIR, env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    print(f"old ProcessWorker runner: submitting {jobs} jobs ({submit(data, 0, jobs):.2f} s each)")
    with get_client(sync_client=True) as client:
        waiting, crashed = wait_waiting(client, jobs, timeout_s)
        sample = measure_settled(stack, waiting, crashed)
        print(_row(f"N={waiting}, old runner", sample), flush=True)
        kill_marked(stack.paths.root)
        time.sleep(1)
        up(echo=lambda line: print(f"  yoloq up: {line}"))
        print(f"in-process runner: adopting the {waiting} waiting jobs")
        adopted, _ = wait_waiting(client, jobs, timeout_s)
        if adopted != waiting:
            raise SystemExit(f"the in-process runner adopted {adopted} of {waiting} jobs")
    return sample


CONTROL_PLANE = ("server", "runner", "worker", "api", "old runner")
GOAL_MB = 1500  # issue 10: the control plane with 500 waiting jobs


def goal_line(s: Sample) -> str:
    """The control plane (the stack's services) against the goal, and the node's warm launcher
    (the paused GPU worker's only child: no segment runs) beside it, constant in jobs."""
    plane = sum(mb for role, (_, mb) in s.by_role.items() if role in CONTROL_PLANE)
    launcher = s.by_role.get("worker child", (0, 0.0))[1]
    verdict = "met" if plane <= GOAL_MB else "not met"
    return (f"{s.jobs} waiting jobs: control plane (server, runner, GPU worker, yoloq API) "
            f"{plane:,.0f} MB, goal at most {GOAL_MB:,} MB: {verdict}; the node's warm launcher "
            f"{launcher:,.0f} MB beside it; {s.rss_mb:,.0f} MB in all")


def _row(label: str, s: Sample) -> str:
    roles = "; ".join(f"{r} {n}, {mb:.0f}" for r, (n, mb) in s.by_role.items())
    crashed = f" ({s.crashed} more crashed at start)" if s.crashed else ""
    return f"| {label}{crashed} | {s.processes} | {s.rss_mb:.0f} | {roles} |"


def table(samples: list[Sample], old: Sample | None) -> str:
    lines = ["| queued jobs (waiting) | processes | RSS total (MB) | by role: processes, MB |",
             "|---|---:|---:|---|"]
    lines += [_row(str(s.jobs), s) for s in samples]
    for low, high in itertools.pairwise(samples[1:]):
        if high.jobs > low.jobs:
            lines.append(f"| {low.jobs} -> {high.jobs}: per extra waiting job | "
                         f"{(high.processes - low.processes) / (high.jobs - low.jobs):+.2f} | "
                         f"{(high.rss_mb - low.rss_mb) / (high.jobs - low.jobs):+.1f} | |")
    if old is not None:
        lines.append(_row(f"{old.jobs}, old ProcessWorker runner", old))
        new = next((s for s in samples if s.jobs >= old.jobs and s.jobs > 0), None)
        if new is not None and old.jobs:
            per_old = (old.rss_mb - samples[0].rss_mb) / old.jobs
            per_new = (new.rss_mb - samples[0].rss_mb) / new.jobs
            lines += ["", (f"per waiting job above the idle stack: old {per_old:.0f} MB ({old.jobs} "
                           f"jobs), new {per_new:.1f} MB ({new.jobs} jobs): {per_old / per_new:.0f}x; "
                           f"total RSS old/new at {old.jobs} vs {new.jobs} jobs: "
                           f"{old.rss_mb / new.rss_mb:.1f}x; processes {old.processes} vs {new.processes}")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="largest N")
    parser.add_argument("--checkpoints", default="0,20,100,500", help="N at which to measure")
    parser.add_argument("--old-at", type=int, default=20, help="N for the old ProcessWorker runner; 0: skip")
    parser.add_argument("--timeout-s", type=float, default=1800, help="per checkpoint")
    args = parser.parse_args(argv)
    points = sorted({int(p) for p in args.checkpoints.split(",") if p.strip()} | {0})
    points = [p for p in points if p <= args.jobs]
    if args.old_at and args.old_at not in points:
        raise SystemExit(f"--old-at {args.old_at} must be one of the checkpoints {points}")

    from prefect.client.orchestration import get_client

    from yoloq.ops.stack import _read_pid, api_settings, private_stack
    from yoloq.datasets.synth import synth_dataset

    # A bench stopped with SIGTERM (kill, pkill) still resumes the paused worker and stops the
    # stack on the way out; else the worker stays stopped and keeps its launcher alive.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = Path(tempfile.mkdtemp(prefix="yoloq-queue-scale-"))
    print(f"private stack in {home}: 1 declared slot (1xCPU:8), min runtime 0, GPU worker "
          f"paused (SIGSTOP); jobs submitted in-process with create_job_run")
    with private_stack(home) as stack, api_settings(stack):
        worker = _read_pid(stack, "worker")
        wait_worker_ready()
        signal_group(worker, signal.SIGSTOP)
        try:
            data = synth_dataset(home / "shapes", train=8, val=4, imgsz=64, seed=0)
            time.sleep(3)
            samples, old, submitted, waiting, ended = [measure(stack, 0)], None, 0, 0, 0
            print(_row("N=0", samples[0]), flush=True)
            if args.old_at:
                old = measure_old(stack, data, args.old_at, args.timeout_s)
                submitted, waiting, ended = args.old_at, old.jobs, old.crashed
            for point in points[1:]:
                if point > waiting:
                    per = submit(data, submitted, submitted + point - waiting)
                    print(f"in-process runner: {point - waiting} more jobs ({per:.2f} s each)")
                    submitted += point - waiting
                    with get_client(sync_client=True) as client:
                        waiting, ended_now = wait_waiting(client, submitted, args.timeout_s)
                    print(f"  {waiting} waiting, {ended_now - ended} crashed at start")
                    samples.append(measure_settled(stack, waiting, ended_now - ended))
                    ended = ended_now
                else:
                    samples.append(measure_settled(stack, waiting, 0))
                print(_row(f"N={waiting}", samples[-1]), flush=True)
        finally:
            signal_group(worker, signal.SIGCONT)
    print()
    print(table(samples, old))
    print()
    print(goal_line(samples[-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Submit cost per job, side by side: the Python API, one CLI call per job, one CLI call for a sweep.

Starts a private embedded stack (`yoloq.ops.stack.private_stack`: its own state folder and port,
one declared slot `1xCPU:8`, minimum runtime 0) and pauses its job runner and GPU worker
(SIGSTOP of their process groups) once the worker has published its node, so that the runs
created stay Scheduled and nothing trains or analyses beside the measurement: what is timed is
submission alone (local analysis, tier cap and pool fit checks, run creation, audit event).
Each job: yolov8n.yaml, 1 epoch, 64 px, batch 4, no export, on a synthetic 8/4-image dataset.

(a) API: `load_spec` + `analyse` + `yoloq.commands.submit.submit_job` in this process (the first
    call, which pays Prefect's import, is left out of the p50);
(b) CLI, one job: `python -m yoloq.cli submit one.yaml`, one process per job, as a user on the
    stack's host runs it: the CLI finds the stack's local operator secret in the state folder and
    POSTs the job to the stack's warm yoloq API (`yoloq.client.local_stack`), importing no Prefect;
(b') the same call on the Prefect path, which a batch or `--gpu` call takes: the CLI analyses the
    job itself and creates the run through Prefect's client (forced here by naming the stack's
    Prefect server in PREFECT_API_URL, as a user pointing the CLI at a server does);
(c) CLI, sweep: one `python -m yoloq.cli submit sweep.yaml` whose grid expands to N jobs;
(d) CLI, one job, through the stack's yoloq API: the same call with `YOLOQ_SERVER` (the stack's
    REST URL) and `YOLOQ_TOKEN` (a token of team vision, `yoloq team add`), as after `yoloq login`:
    the CLI reads the spec and POSTs it, the API process analyses, checks and creates the run, and
    the CLI never imports Prefect.

    .venv/bin/python bench/submit.py                  # 20 API, 10 CLI, a 100-job sweep
    .venv/bin/python bench/submit.py --api 5 --cli 3 --sweep 20
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GOALS = {"api": 0.3, "cli": 1.5, "sweep": 20.0}  # issue 10: p50 per job / per job / 100-job sweep total
BASE = {"name": "bench", "team": "vision", "priority": "normal", "model": "yolov8n.yaml",
        "data": "shapes/data.yaml", "epochs": 1, "imgsz": 64, "batch": 4, "export": [],
        "train_args": {"seed": 0, "deterministic": True, "workers": 0, "plots": False}}


def write_files(home: Path, sweep_jobs: int) -> tuple[Path, Path]:
    """one.yaml and a sweep of `sweep_jobs` jobs (lr0 x seed) next to the dataset."""
    one = home / "one.yaml"
    one.write_text(yaml.safe_dump(BASE))
    seeds = max(1, sweep_jobs // 10)
    lrs = [round(0.001 * (i + 1), 4) for i in range(max(1, sweep_jobs // seeds))]
    sweep = home / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": "one.yaml", "grid": {"lr0": lrs, "seed": list(range(seeds))}}))
    return one, sweep


def time_api(one: Path, count: int) -> list[float]:
    """Seconds per `submit_job` call (with the spec loaded and analysed, as the CLI does)."""
    from yoloq.analysis import analyse
    from yoloq.commands.submit import submit_job
    from yoloq.domain.spec import load_spec

    times = []
    for _ in range(count + 1):  # the first call imports Prefect and is dropped
        began = time.perf_counter()
        spec = load_spec(one)
        submit_job(spec, analysis=analyse(spec))
        times.append(time.perf_counter() - began)
    return times[1:]


def cli(*args: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> float:
    began = time.perf_counter()
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    out = subprocess.run([sys.executable, "-m", "yoloq.cli", "submit", *args], capture_output=True, text=True,
                         check=False, env=environ)
    if out.returncode != 0:
        raise SystemExit(f"yoloq submit {' '.join(args)} failed: {out.stderr.strip()}")
    return time.perf_counter() - began


def count_jobs(client) -> int:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    return client.count_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["yolo-job"])))


def signal_group(pid: int | None, sig: signal.Signals) -> None:
    if pid:
        try:
            os.killpg(os.getpgid(pid), sig)
        except ProcessLookupError:
            pass


def wait_worker_ready(timeout_s: float = 180) -> None:
    from work_pools.nodes import live_pool_gpus

    deadline = time.monotonic() + timeout_s
    while not live_pool_gpus():
        if time.monotonic() > deadline:
            raise SystemExit(f"the GPU worker published no node within {timeout_s:.0f} s")
        time.sleep(1)


def report(api: list[float], per_cli: list[float], sweep_total: float, sweep_jobs: int,
           via_api: list[float], prefect_path: list[float]) -> str:
    p50 = statistics.median
    rows = [("API call (submit_job), per job", p50(api), GOALS["api"], f"p50 of {len(api)}"),
            ("CLI, one call per job (on the stack's host: its API as local operator)", p50(per_cli),
             GOALS["cli"], f"p50 of {len(per_cli)}"),
            ("CLI, one call per job, Prefect path (what a batch or `--gpu` call takes)", p50(prefect_path),
             GOALS["cli"], f"p50 of {len(prefect_path)}"),
            ("CLI, one call per job, through the yoloq API (`yoloq login`)", p50(via_api), GOALS["cli"],
             f"p50 of {len(via_api)}"),
            (f"CLI, one call for a {sweep_jobs}-job sweep, total", sweep_total,
             GOALS["sweep"] * sweep_jobs / 100, "one call"),
            ("  the same, per job", sweep_total / sweep_jobs, GOALS["sweep"] / 100, "")]
    lines = ["| submit | measured (s) | goal (s) | |", "|---|---:|---:|---|"]
    lines += [f"| {name} | {value:.2f} | {goal:.2f} | {note} |" for name, value, goal, note in rows]
    lines.append("")
    lines.append(f"one CLI call per job, Prefect path / local operator: {p50(prefect_path) / p50(per_cli):.1f}x; "
                 f"local operator / through the yoloq API: {p50(per_cli) / p50(via_api):.1f}x; "
                 f"one CLI call per job / API call: {p50(per_cli) / p50(api):.1f}x; "
                 f"one CLI call per job / sweep per job: {p50(per_cli) / (sweep_total / sweep_jobs):.1f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", type=int, default=20, help="API calls timed")
    parser.add_argument("--cli", type=int, default=10, help="one-job CLI calls timed")
    parser.add_argument("--sweep", type=int, default=100, help="jobs in the sweep (a multiple of 10)")
    args = parser.parse_args(argv)

    from yoloq.base.errors import UserError
    from yoloq.ops.stack import api_settings, down, private_stack

    home = Path(tempfile.mkdtemp(prefix="yoloq-bench-submit-"))
    print(f"private stack in {home}: 1 declared slot (1xCPU:8); job runner and GPU worker paused (SIGSTOP); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    try:
        with private_stack(home) as stack, api_settings(stack):
            figures = measure(stack, home, args)
    except UserError:  # a stack that did not start is stopped (private_stack stops only a started one)
        down(echo=lambda *a: None)
        raise
    print()
    print(report(*figures))
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    return 0


def measure(stack, home: Path, args: argparse.Namespace) -> tuple[list[float], list[float], float, int, list[float],
                                                                  list[float]]:
    """The three figures on a started private stack (runner and worker paused meanwhile)."""
    from prefect.client.orchestration import get_client

    from yoloq.ops.stack import _read_pid
    from yoloq.datasets.synth import synth_dataset

    paused = [_read_pid(stack, "runner"), _read_pid(stack, "worker")]
    wait_worker_ready()
    time.sleep(2)
    for pid in paused:
        signal_group(pid, signal.SIGSTOP)
    try:
        synth_dataset(home / "shapes", train=8, val=4, imgsz=64, seed=0)
        one, sweep = write_files(home, args.sweep)
        api = time_api(one, args.api)
        print(f"(a) API: p50 {statistics.median(api):.2f} s over {len(api)} calls", flush=True)
        if not (stack.paths.root / "api-operator.json").exists():
            raise SystemExit("the stack's API published no local operator secret: (b) would time the Prefect path")
        per_cli = [cli(str(one), drop=("PREFECT_API_URL",)) for _ in range(args.cli)]
        print(f"(b) CLI per job: p50 {statistics.median(per_cli):.2f} s over {len(per_cli)} calls", flush=True)
        prefect_path = [cli(str(one), env={"PREFECT_API_URL": stack.api_url}, drop=("YOLOQ_PORT",))
                        for _ in range(args.cli)]
        print(f"(b') CLI per job, Prefect path: p50 {statistics.median(prefect_path):.2f} s over "
              f"{len(prefect_path)} calls", flush=True)
        with get_client(sync_client=True) as client:
            before = count_jobs(client)
            sweep_total = cli(str(sweep))
            created = count_jobs(client) - before
        if created != args.sweep:
            raise SystemExit(f"the sweep created {created} runs, not {args.sweep}")
        print(f"(c) CLI sweep: {sweep_total:.1f} s for {created} jobs", flush=True)
        logged_in = login_env(stack)
        via_api = [cli(str(one), env=logged_in) for _ in range(args.cli)]
        print(f"(d) CLI per job through the yoloq API: p50 {statistics.median(via_api):.2f} s over "
              f"{len(via_api)} calls", flush=True)
    finally:
        for pid in paused:
            signal_group(pid, signal.SIGCONT)
    return api, per_cli, sweep_total, args.sweep, via_api, prefect_path


def login_env(stack) -> dict[str, str]:
    """What `yoloq login` gives a shell: the stack's REST URL and a new token of team vision."""
    from yoloq.records.teams import TeamStore

    token = TeamStore().add("vision")
    return {"YOLOQ_SERVER": stack.rest_url, "YOLOQ_TOKEN": token}


if __name__ == "__main__":
    raise SystemExit(main())

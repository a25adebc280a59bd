"""What yoloq costs over plain ultralytics for the same small job, side by side in one run.

    python bench/overhead.py [--epochs 3] [--images 32] [--imgsz 64] [--repeat 1]
                             [--modes warm,cold]
    python bench/overhead.py --starts 10     # segment process start alone, warm vs cold
    python bench/overhead.py --modes warm --wake poll,events   # event wake vs poll only

`YOLOQ_BENCH_GPUS` sets the private stack's slots (default `1xCPU:8`; empty: the worker's
NVML inventory of the real GPUs, as bench/gpu_check.sh runs it).

The job: yolov8n.yaml on a synthetic shapes dataset, batch 8, seed 0, workers 0,
plots off. It runs three ways, in this order, `--repeat` times (medians are shown):

- plain:   a fresh Python process running `YOLO("yolov8n.yaml").train(...)`,
           timed from process start to exit (import + train + ultralytics' final val);
- yoloq-1: `submit` on a private real stack (Prefect server, job runner, yolo-gpu
           worker, one CPU slot) with segment_epochs = epochs (1 segment);
- yoloq-3: the same with segment_epochs = 1 (epochs segments, 3 by default).

Each yoloq way runs once per start mode of the node agent (`--modes`, both by default, on
the same stack: the worker is restarted with YOLOQ_WARM_START=1 or 0, then an untimed
warm-up job lets its launcher finish importing): `warm` forks segments from the node's
pre-imported launcher, `cold` starts `python -m prefect.engine` per segment.

Per segment the bench reads where the fixed cost goes, from Prefect's run times and the
job's epoch ledger: the parent's reaction (previous segment's end -> next segment run
created), queue -> Running (the scheduler's and the worker's polls, the process start,
Prefect's engine loading the run and the flow), Running -> first epoch start (checkpoint
restore, trainer setup), and their sum, the fixed cost queue -> training loop.

yoloq wall time is submit -> the parent run's end (Completed). The yoloq jobs
use `export: []` (no export step; the spec's default would be TorchScript), but
the last segment always evaluates best.pt on the test/val split: the evaluate
and export task runs are timed from Prefect and shown apart ("excl. eval+export").
`--wake poll,events` runs the whole bench once per wake mode, each in a fresh process on
its own private stack (`YOLOQ_WAKE=poll`: the worker and the runner's segment watch wake
only at their 1 s polls; `events`: Prefect's event stream wakes them), then prints the
fixed cost per segment of each side by side with the ratio poll / events.
The 2-core machine may be shared: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.wake_modes import parse_wakes, run_per_wake

BATCH = 8
TRAIN_ARGS = {"seed": 0, "deterministic": True, "workers": 0, "plots": False}
PLAIN_SCRIPT = """
import json, sys, time
from yoloq.base import offline
offline.apply()
from ultralytics import YOLO
offline.quiet_ultralytics()
args = json.loads(sys.argv[1])
t0 = time.time()
YOLO("yolov8n.yaml").train(**args)
print("TRAIN_S", time.time() - t0)
"""


@dataclass(frozen=True)
class SegmentCost:
    """Where one segment's fixed cost goes (seconds)."""

    parent_s: float          # previous segment's end -> this segment run created (0 for the first)
    queue_to_running_s: float  # created -> Running: polls, process start, engine start
    running_to_loop_s: float   # Running -> first epoch start: restore, trainer setup

    @property
    def fixed_s(self) -> float:  # queue -> training loop
        return self.queue_to_running_s + self.running_to_loop_s


@dataclass(frozen=True)
class YoloqRun:
    wall_s: float            # submit -> parent run Completed
    segments: int
    segment_run_s: float     # sum of segment flow runs' Running -> end
    evaluate_s: float        # the evaluate task run (last segment)
    export_s: float          # the export task run, if the spec asked for one
    costs: tuple[SegmentCost, ...] = ()

    @property
    def eval_export_s(self) -> float:
        return self.evaluate_s + self.export_s

    @property
    def wall_without_finish_s(self) -> float:
        return self.wall_s - self.eval_export_s


def write_spec(path: Path, data: Path, name: str, epochs: int, imgsz: int,
               segment_epochs: int, **extra: Any) -> Path:
    import yaml

    spec = {"name": name, "team": "bench", "priority": "normal", "model": "yolov8n.yaml",
            "data": str(data), "epochs": epochs, "imgsz": imgsz, "batch": BATCH,
            "segment_epochs": segment_epochs, "export": [], "train_args": TRAIN_ARGS, **extra}
    path.write_text(yaml.safe_dump(spec))
    return path


def submit(spec_path: Path) -> tuple[str, float]:
    """What `yoloq submit` does, in this process. Returns (job id, submit time)."""
    from yoloq.analysis import analyse
    from yoloq.commands.submit import submit_job
    from yoloq.domain.spec import load_spec

    spec = load_spec(spec_path)
    analyse(spec)
    submitted_at = time.time()
    result = submit_job(spec)
    return result["job_id"], submitted_at


def wait_final(client: Any, flow_run_id: str, timeout_s: float = 1800) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.read_flow_run(flow_run_id)
        if run.state and run.state.is_final():
            return run
        time.sleep(0.5)
    raise TimeoutError(f"flow run {flow_run_id} did not finish in {timeout_s:.0f}s")


def parent_run_id(client: Any, job_id: str) -> Any:
    from yoloq.records.jobs import parent_run

    return parent_run(client, job_id).id


def ts(value: Any) -> float:
    return value.timestamp()


# -- the three ways ----------------------------------------------------------------------

def run_plain(data: Path, epochs: int, imgsz: int, workdir: Path) -> tuple[float, float]:
    """(process wall s, train() call s) for plain ultralytics in a fresh process."""
    args = {"data": str(data), "epochs": epochs, "imgsz": imgsz, "batch": BATCH,
            "device": "cpu", "project": str(workdir), "name": "plain", "exist_ok": True,
            **TRAIN_ARGS}
    started = time.time()
    out = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT, json.dumps(args)], check=False,
                         capture_output=True, text=True, timeout=1800)
    wall = time.time() - started
    if out.returncode != 0:
        raise RuntimeError(f"plain ultralytics failed:\n{out.stderr[-2000:]}")
    train_s = float(out.stdout.split("TRAIN_S")[-1].split()[0])
    return wall, train_s


def run_yoloq(spec_path: Path) -> YoloqRun:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    job_id, submitted_at = submit(spec_path)
    with get_client(sync_client=True) as client:
        parent = wait_final(client, parent_run_id(client, job_id))
        if not parent.state.is_completed():
            raise RuntimeError(f"job {job_id} ended {parent.state.name}: {parent.state.message}")
        segments = segments_of(client, job_id)
        segment_s = sum(ts(s.end_time) - ts(s.start_time) for s in segments)
        tasks = _task_seconds(client, segments[-1].id)
    return YoloqRun(wall_s=ts(parent.end_time) - submitted_at, segments=len(segments),
                    segment_run_s=segment_s, evaluate_s=tasks.get("evaluate", 0.0),
                    export_s=tasks.get("export", 0.0), costs=segment_costs(job_id, segments))


def segment_costs(job_id: str, segments: list[Any]) -> tuple[SegmentCost, ...]:
    """Per segment that trained: parent reaction, queue -> Running, Running -> first epoch."""
    from datetime import datetime

    from yoloq.records.jobs import epoch_trainings

    first_epoch: dict[str, float] = {}
    for record in epoch_trainings(job_id):
        start = datetime.fromisoformat(record.start).timestamp()
        first_epoch[record.segment] = min(start, first_epoch.get(record.segment, start))
    costs, previous_end = [], None
    for run in segments:
        loop = first_epoch.get(str(run.id))
        if loop is None or run.start_time is None:
            continue
        costs.append(SegmentCost(
            parent_s=ts(run.created) - previous_end if previous_end else 0.0,
            queue_to_running_s=ts(run.start_time) - ts(run.created),
            running_to_loop_s=loop - ts(run.start_time)))
        previous_end = ts(run.end_time)
    return tuple(costs)


def _task_seconds(client: Any, flow_run_id: Any) -> dict[str, float]:
    """Seconds per task name ("evaluate-1a2" counts as "evaluate") in one flow run."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    seconds: dict[str, float] = {}
    for task in tasks:
        if task.start_time and task.end_time:
            name = task.name.rsplit("-", 1)[0]
            seconds[name] = seconds.get(name, 0.0) + ts(task.end_time) - ts(task.start_time)
    return seconds


# -- process start alone ---------------------------------------------------------------

def process_starts(n: int) -> None:
    """Segment process start -> imports done, cold (`python -m`) and warm (forked by a
    launcher), alternating so both see the same load. No stack, no training."""
    from work_pools.warm_start import PROJECT_DIR, LauncherClient
    from yoloq.base import offline

    offline.apply()
    launcher = LauncherClient(dict(os.environ), PROJECT_DIR)
    print(f"launcher ready, its imports took {launcher.wait_ready()['import_s']:.1f} s", flush=True)
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(n):
            out = Path(folder) / f"cold{i}"
            started = time.time()
            subprocess.run([sys.executable, "-m", "bench.start_probe", str(out)], cwd=PROJECT_DIR,
                           check=True)
            times["cold"].append(float(out.read_text()) - started)
            out = Path(folder) / f"warm{i}"
            started = time.time()
            pid = launcher.spawn(dict(os.environ), PROJECT_DIR, module="bench.start_probe",
                                 argv=[str(out)])
            launcher.exit_future(pid).result(timeout=600)
            times["warm"].append(float(out.read_text()) - started)
            print(f"start {i + 1}: cold {times['cold'][-1]:.2f} s, warm {times['warm'][-1]:.2f} s",
                  flush=True)
    launcher.close()
    cold, warm = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(f"segment process start -> imports done, median of {n}: cold {cold:.2f} s, warm "
          f"{warm:.2f} s, saved {cold - warm:.2f} s per segment")


# -- report ------------------------------------------------------------------------------

def median_run(runs: list[YoloqRun]) -> YoloqRun:
    return YoloqRun(wall_s=statistics.median(r.wall_s for r in runs), segments=runs[0].segments,
                    segment_run_s=statistics.median(r.segment_run_s for r in runs),
                    evaluate_s=statistics.median(r.evaluate_s for r in runs),
                    export_s=statistics.median(r.export_s for r in runs),
                    costs=tuple(c for r in runs for c in r.costs))


def mean_cost(runs: list[YoloqRun]) -> SegmentCost:
    """Mean over every segment of these runs (the first segment has no parent reaction)."""
    costs = [c for r in runs for c in r.costs]
    later = [c.parent_s for r in runs for c in r.costs[1:]]
    return SegmentCost(parent_s=statistics.mean(later) if later else 0.0,
                       queue_to_running_s=statistics.mean(c.queue_to_running_s for c in costs),
                       running_to_loop_s=statistics.mean(c.running_to_loop_s for c in costs))


def report(plain: list[tuple[float, float]], modes: dict[str, tuple[list[YoloqRun], list[YoloqRun]]],
           epochs: int) -> None:
    plain_wall = statistics.median(p[0] for p in plain)
    plain_train = statistics.median(p[1] for p in plain)
    print(f"\nmedians of {len(plain)} run(s); seconds")
    print(f"{'':30}{'wall':>8}{'excl. eval+export':>19}{'segments':>10}{'sum segment runs':>18}")
    print(f"{'plain ultralytics':30}{plain_wall:8.1f}{'':>19}{'':>10}{'':>18}"
          f"   (train() call alone {plain_train:.1f})")
    for mode, (one, many) in modes.items():
        y1, y3 = median_run(one), median_run(many)
        for label, run in ((f"yoloq {mode}, 1 segment", y1),
                           (f"yoloq {mode}, {y3.segments} segments", y3)):
            print(f"{label:30}{run.wall_s:8.1f}{run.wall_without_finish_s:19.1f}{run.segments:10d}"
                  f"{run.segment_run_s:18.1f}   (evaluate {run.evaluate_s:.1f}, "
                  f"export {run.export_s:.1f})")
    print("\nfixed cost per segment, mean over every segment of the yoloq runs (seconds):")
    print(f"{'start':8}{'queue->Running':>16}{'Running->loop':>15}{'queue->loop':>13}"
          f"{'parent reaction':>17}{'per extra segment':>19}")
    for mode, (one, many) in modes.items():
        y1, y3 = median_run(one), median_run(many)
        cost = mean_cost(one + many)
        extra = (y3.wall_s - y1.wall_s) / max(1, y3.segments - y1.segments)
        print(f"{mode:8}{cost.queue_to_running_s:16.1f}{cost.running_to_loop_s:15.1f}"
              f"{cost.fixed_s:13.1f}{cost.parent_s:17.1f}{extra:19.1f}")
    print("queue->Running: the scheduler's and worker's polls, the process start (fork or "
          "interpreter + imports), Prefect's engine loading the run and flow; Running->loop: "
          "checkpoint restore, trainer setup; parent reaction: previous segment's end -> next "
          "segment run created; per extra segment: (yoloq N - yoloq 1 wall) / (N - 1)")
    print("plain = fresh process start->exit (import, train, ultralytics' final val); "
          "yoloq = submit->parent Completed (parent start, analyse, queueing, segment "
          "processes, checkpoints to the store, MLflow, final val, evaluate; export off)")
    for mode, (one, many) in modes.items():
        y1, y3 = median_run(one), median_run(many)
        print(f"ratio yoloq/plain ({mode}): 1 segment {y1.wall_s / plain_wall:.2f}x, {y3.segments} "
              f"segments {y3.wall_s / plain_wall:.2f}x (excl. eval+export: "
              f"{y1.wall_without_finish_s / plain_wall:.2f}x, "
              f"{y3.wall_without_finish_s / plain_wall:.2f}x)  [{epochs} epochs]")


def _load_run(row: dict[str, Any]) -> YoloqRun:
    return YoloqRun(**{**row, "costs": tuple(SegmentCost(**c) for c in row["costs"])})


def compare_wake(by_wake: dict[str, dict[str, Any]]) -> None:
    """Per wake mode and start mode: queue->Running, parent reaction, fixed cost, extra segment."""
    print("\nwake modes side by side (mean over every segment; seconds)")
    print(f"{'wake':8}{'start':7}{'queue->Running':>16}{'parent reaction':>17}{'queue->loop':>13}"
          f"{'per extra segment':>19}{'yoloq-1/plain':>15}")
    figures: dict[str, dict[str, tuple[float, ...]]] = {}
    for wake, data in by_wake.items():
        plain_wall = statistics.median(p[0] for p in data["plain"])
        for mode, (one, many) in data["results"].items():
            one, many = [_load_run(r) for r in one], [_load_run(r) for r in many]
            cost, y1, y3 = mean_cost(one + many), median_run(one), median_run(many)
            extra = (y3.wall_s - y1.wall_s) / max(1, y3.segments - y1.segments)
            row = (cost.queue_to_running_s, cost.parent_s, cost.fixed_s, extra, y1.wall_s / plain_wall)
            figures.setdefault(mode, {})[wake] = row
            print(f"{wake:8}{mode:7}{row[0]:16.2f}{row[1]:17.2f}{row[2]:13.2f}{row[3]:19.2f}"
                  f"{row[4]:14.2f}x")
    wakes = list(by_wake)
    for mode, rows in figures.items():
        a, b = rows[wakes[0]], rows[wakes[-1]]
        ratios = ", ".join(f"{name} {x / y:.2f}" if y > 0 else f"{name} -"
                           for name, x, y in zip(("queue->Running", "parent reaction",
                                                  "queue->loop", "per extra segment"), a, b))
        print(f"ratio {wakes[0]}/{wakes[-1]} ({mode}): {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--images", type=int, default=32, help="training images")
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--starts", type=int, default=0,
                        help="only time N segment process starts, warm vs cold (no stack)")
    parser.add_argument("--modes", default="warm,cold",
                        help="segment start modes to compare on one stack: warm, cold or both")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed 1-epoch job that creates MLflow's database etc.")
    parser.add_argument("--keep", action="store_true", help="keep the state folder")
    parser.add_argument("--wake", default=None,
                        help="comma-separated wake modes to compare: poll, events")
    parser.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.starts:
        process_starts(args.starts)
        return
    wakes = parse_wakes(args.wake)
    if len(wakes) > 1:
        if by_wake := run_per_wake(__file__, wakes):
            compare_wake(by_wake)
        return
    if wakes:
        os.environ["YOLOQ_WAKE"] = wakes[0]

    root = Path(tempfile.mkdtemp(prefix="yoloq-bench-overhead-"))
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(root / "data", train=args.images, val=max(4, args.images // 4),
                         imgsz=args.imgsz, seed=0)
    spec_one = write_spec(root / "one.yaml", data, "bench-one", args.epochs, args.imgsz, args.epochs)
    spec_many = write_spec(root / "many.yaml", data, "bench-many", args.epochs, args.imgsz, 1)
    modes = parse_modes(args.modes)
    plain: list[tuple[float, float]] = []
    results: dict[str, tuple[list[YoloqRun], list[YoloqRun]]] = {m: ([], []) for m in modes}
    warmup = write_spec(root / "warm.yaml", data, "bench-warmup", 1, args.imgsz, 1)
    try:
        from yoloq.ops.stack import private_stack, restart_worker

        with private_stack(root / "home", os.environ.get("YOLOQ_BENCH_GPUS", "1xCPU:8")):
            for n in range(args.repeat):
                plain.append(run_plain(data, args.epochs, args.imgsz, root / "plain"))
                print(f"run {n + 1}: plain {plain[-1][0]:.1f} s", flush=True)
                for mode in modes:
                    restart_worker({"YOLOQ_WARM_START": "1" if mode == "warm" else "0"})
                    if not args.no_warmup:  # also waits for the new worker's launcher
                        print(f"  {mode} warm-up job (untimed): {run_yoloq(warmup).wall_s:.1f} s",
                              flush=True)
                    one, many = results[mode]
                    one.append(run_yoloq(spec_one))
                    many.append(run_yoloq(spec_many))
                    print(f"  {mode}: yoloq-1 {one[-1].wall_s:.1f} s, yoloq-{many[-1].segments} "
                          f"{many[-1].wall_s:.1f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(plain, results, args.epochs)
    if args.json:
        from dataclasses import asdict

        Path(args.json).write_text(json.dumps({"plain": plain, "results": {
            m: [[asdict(r) for r in one], [asdict(r) for r in many]]
            for m, (one, many) in results.items()}}))


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or any(m not in ("warm", "cold") for m in modes):
        print(f"--modes: expected warm, cold or warm,cold, got {text!r}", file=sys.stderr)
        sys.exit(2)
    return modes


if __name__ == "__main__":
    main()

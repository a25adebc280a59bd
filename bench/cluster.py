"""One scheduler over several node agents, under load, on the embedded stack.

    python bench/cluster.py [--jobs 60] [--nodes 3] [--slots 2] [--epochs 1]

Settings that differ from the defaults: a private embedded stack (SQLite Prefect, local
checkpoints and MLflow); `--nodes` node agents on this host, each with `--slots` declared
CPU slots (`YOLOQ_DECLARED_GPUS=<slots>xCPU:8`); the policy block saved with team weights
a=2, b=1, c=1, d=1 and `min_runtime_s=0` (so an urgent job may preempt at once); tiny real
jobs (yolov8n, 8+4 synthetic images at 64 px, `--epochs` epochs in one segment). Jobs are
submitted in one burst through the Python API (`yoloq.commands.submit.submit_job`), teams
round-robin and the same tier mix for every team (1 in 10 urgent, 2 high, 4 normal, 3 low),
so weighted fair share decides the shares within each tier.

Printed, from Prefect's run records and the epoch ledger:
- preemptions done (victim segments) and needed (distinct preemptor jobs, each wanting one
  slot): done <= needed means no preemption was duplicated or wasted;
- realised GPU share per team over the contended interval (from the first segment start
  until the first team has nothing left to run) against its weight share, and the error;
- queueing delay per tier (job submitted -> first segment running), p50 and p95;
- the scheduler's pass and decide time (p50/p95) and decisions per second, from the
  leader's `yoloq-scheduler-stats`;
- trainings per epoch (every epoch of every job must be trained exactly once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WEIGHTS = {"a": 2.0, "b": 1.0, "c": 1.0, "d": 1.0}
TIER_MIX = ["urgent"] + ["high"] * 2 + ["normal"] * 4 + ["low"] * 3
TRAIN_ARGS = {"seed": 0, "deterministic": True, "workers": 0, "plots": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="yoloq-bench-cluster-"))
    try:
        run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> None:
    from yoloq.ops.stack import current_stack, private_stack, stack_env
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(root / "shapes", train=8, val=4, imgsz=64, seed=0)
    os.environ["YOLOQ_NODE_NAME"] = "n1"
    with private_stack(root / "home", declared_gpus=f"{args.slots}xCPU:8"):
        env = {**stack_env(current_stack()), "YOLOQ_DECLARED_GPUS": f"{args.slots}xCPU:8"}
        env.pop("YOLOQ_NODE_NAME", None)
        agents = [subprocess.Popen([sys.executable, "-m", "yoloq.cli", "node", "--name", f"n{i}"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True) for i in range(2, args.nodes + 1)]
        try:
            _wait_nodes(args.nodes)
            _save_policy()
            jobs = submit_burst(root, data, args)
            ended = _wait_all(jobs)
            report(jobs, ended, args)
        finally:
            for agent in agents:
                os.killpg(agent.pid, signal.SIGTERM)


def _wait_nodes(count: int) -> None:
    from cluster_bench import live_node_names

    deadline = time.monotonic() + 300
    while len(live_node_names()) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {live_node_names()} of {count} node agents joined")
        time.sleep(1)


def _save_policy() -> None:
    from blocks.policy import SchedulingPolicy

    SchedulingPolicy(team_weights=WEIGHTS, min_runtime_s=0).save("yoloq-policy", overwrite=True)


def submit_burst(root: Path, data: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Submit every job in one process; returns job id -> {team, tier, submitted}."""
    from yoloq.analysis import analyse
    from yoloq.commands.submit import submit_job
    from yoloq.domain.spec import JobSpec

    jobs = {}
    teams = sorted(WEIGHTS)
    for i in range(args.jobs):
        team, tier = teams[i % len(teams)], TIER_MIX[(i // len(teams)) % len(TIER_MIX)]
        spec = JobSpec.model_validate({
            "name": f"load{i:03d}", "team": team, "priority": tier, "model": "yolov8n.yaml",
            "data": str(data), "epochs": args.epochs, "segment_epochs": args.epochs, "imgsz": 64,
            "batch": 4, "export": [], "train_args": TRAIN_ARGS})
        submitted = time.time()
        job_id = submit_job(spec, analysis=analyse(spec))["job_id"]
        jobs[job_id] = {"team": team, "tier": tier, "submitted": submitted}
    print(f"submitted {len(jobs)} jobs", flush=True)
    return jobs


def _wait_all(jobs: dict[str, dict[str, Any]], timeout_s: float = 7200) -> dict[str, Any]:
    from cluster_bench import job_states

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = job_states(list(jobs))
        done = sum(1 for s in states.values() if s in ("Completed", "Failed", "Cancelled", "Crashed"))
        print(f"\r{done}/{len(jobs)} jobs ended", end="", flush=True)
        if done == len(jobs):
            print()
            return states
        time.sleep(5)
    raise SystemExit("jobs did not finish in time")


def report(jobs: dict[str, dict[str, Any]], ended: dict[str, str], args: argparse.Namespace) -> None:
    from cluster_bench import scheduler_stats, segment_records, trainings

    segs = segment_records(list(jobs))
    failed = {j: s for j, s in ended.items() if s != "Completed"}
    print(f"\n{len(jobs)} jobs on {args.nodes} nodes x {args.slots} slots: "
          f"{len(jobs) - len(failed)} completed, {len(failed)} not ({failed or 'none'})")
    victims = [s for s in segs if s["asked"]]
    preemptors = {s["preempted_by"] for s in victims}
    print(f"preemptions: done {len(victims)}, needed {len(preemptors)} "
          f"(distinct preemptor jobs, one slot each)")
    print_shares(segs, jobs)
    print_delays(segs, jobs)
    counts = [n for j in jobs for n in trainings(j).values()]
    print(f"trainings per epoch: {len(counts)} epochs, max {max(counts, default=0)}, "
          f"repeated {sum(1 for n in counts if n > 1)}")
    stats = scheduler_stats()
    print("scheduler (leader's last passes): " + ", ".join(f"{k} {v}" for k, v in stats.items()))


def print_shares(segs: list[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> None:
    """Realised GPU share per team while every team still had work, against its weight."""
    start = min(s["start"] for s in segs)
    end = min(max(s["end"] for s in segs if s["team"] == t) for t in WEIGHTS)
    used = {t: sum(max(0.0, min(s["end"], end) - max(s["start"], start)) for s in segs
                   if s["team"] == t) for t in WEIGHTS}
    total = sum(used.values()) or 1.0
    weight_total = sum(WEIGHTS.values())
    print(f"shares over the contended interval ({end - start:.0f} s):")
    print("  team  weight share  realised  error")
    for team in sorted(WEIGHTS):
        want, got = WEIGHTS[team] / weight_total, used[team] / total
        print(f"  {team:4}  {want:12.2f}  {got:8.2f}  {abs(got - want) / want:5.1%}")


def print_delays(segs: list[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> None:
    first: dict[str, float] = {}
    for s in segs:
        first[s["job"]] = min(first.get(s["job"], float("inf")), s["start"])
    print("queueing delay (submitted -> first segment running):")
    for tier in ("urgent", "high", "normal", "low"):
        delays = sorted(first[j] - info["submitted"] for j, info in jobs.items()
                        if info["tier"] == tier and j in first)
        if delays:
            p50, p95 = delays[len(delays) // 2], delays[min(len(delays) - 1, int(0.95 * len(delays)))]
            print(f"  {tier:6}  n={len(delays):3}  p50 {p50:7.1f} s  p95 {p95:7.1f} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

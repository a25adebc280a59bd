"""One scheduler over several node agents under load: the scenario of tests/test_cluster_load.py.

    python bench/cluster.py [--jobs 60] [--nodes 3] [--slots 2] [--timeout 3600]

The same pool and jobs as the load test, on the cluster profile's real services (Prefect on
PostgreSQL, checkpoints in Swift S3, an MLflow server; `profiles/cluster/services.sh` starts
S3 and PostgreSQL if they are not up): `--nodes` node agents on this host of `--slots`
declared CPU slots each, and `--jobs` tiny real jobs submitted in one `yoloq submit` burst
from teams a, b, c, d with weights 2:1:1:1, jobs per team in proportion to the weights
(a 24, b c d 12 each of 60), interleaved a b a c d, and per team the same tiers in the same
proportions (per 12 jobs of weight 1: 1 urgent, 3 high, 5 normal, 3 low, mixed in time).
Every setting that differs from the defaults is printed first.

Printed, from Prefect's run records and the epoch ledger: jobs completed and epochs not
trained exactly once; preemptions needed (jobs that preempted, one slot each) against done
(victim segments asked); realised share against weight share per team over the contended
interval (first segment start until the first team has nothing left to run), and the error;
usage per team from the scheduler's usage book (what `yoloq usage` shows, unrounded) against
the segments' GPU-seconds x speed; queueing delay per tier (job created -> first segment running, p50 and
p95); the leader's decisions per second and decide time p50/p95 (`yoloq-scheduler-stats`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for all jobs to end")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="yoloq-bench-cluster-"))
    try:
        run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> None:
    from cluster_helpers import (LOAD_JOB, LOAD_ROUND, LOAD_SETTINGS, LOAD_TIER_MIX,
                                 LOAD_WEIGHTS, load_figures, load_pool, submit_load, wait_load)

    from yoloq.datasets.synth import synth_dataset

    print(f"settings: {args.jobs} jobs, {args.nodes} node agents x {args.slots} declared CPU "
          f"slots (YOLOQ_DECLARED_GPUS={args.slots}xCPU:8), cluster profile (PostgreSQL "
          f"Prefect, Swift S3 checkpoints, MLflow server); policy block: team_weights "
          f"{LOAD_WEIGHTS}, min_runtime_s=0; teams in submission order {LOAD_ROUND} (repeated); "
          f"tiers per 12 jobs of weight 1 {LOAD_TIER_MIX}; jobs "
          f"{LOAD_JOB}, train_args {{seed: 0, deterministic: true, workers: 0, plots: false}} "
          f"on 8+4 synthetic 64 px images; environment {LOAD_SETTINGS}, "
          "YOLOQ_POLICY_REFRESH_S=2, YOLOQ_MIN_RUNTIME_S=0; everything else default",
          flush=True)
    data = synth_dataset(root / "shapes", train=8, val=4, imgsz=64, seed=0)
    began = time.monotonic()
    with load_pool(root / "pool", args.nodes, args.slots) as pool:
        ready = time.monotonic()
        ids = submit_load(pool, root / "pool", data, args.jobs)
        submitted = time.monotonic()
        wait_load(pool, ids, args.timeout,
                  echo=lambda line: print(f"\r{line}", end="", flush=True))
        ended = time.monotonic()
        figures = load_figures(pool, ids)
    print(f"\npool up {ready - began:.0f} s; submit {submitted - ready:.0f} s; all jobs ended "
          f"{ended - ready:.0f} s after the submit began")
    print(figures.table())


if __name__ == "__main__":
    main()

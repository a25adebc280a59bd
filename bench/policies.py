"""Replay two generated Philly-like traces (light and overloaded) under fifo,
priority, las and yoloq on the reference cluster, and print one table.

    python bench/policies.py [--jobs 2000] [--seed 0] [--cluster 8xA100-80GB,8xV100-32GB]

Columns: average / p99 JCT (hours), urgent and low p99 queueing delay (hours),
max and p95 finish-time fairness rho, Jain's index vs entitlement, GPU
utilisation, preemptions per job, GPU-hours redone, ETA median abs % error and
80%-interval coverage, and the wall time of the replay.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from work_pools.policy import POLICIES  # noqa: E402
from work_pools.simulate import REFERENCE_CLUSTER, generate, parse_cluster, simulate, summarise  # noqa: E402

HEADER = ("trace", "policy", "avgJCT h", "p99JCT h", "urg p99 h", "low p99 h", "max rho",
          "p95 rho", "jain", "util", "preempt/job", "redone GPUh", "ETA mape", "ETA cov80", "sim s")


def _h(seconds):
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _f(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def row(trace: str, s: dict, wall: float) -> tuple:
    waits = s["wait_p99_s_by_tier"]
    return (trace, s["policy"], _h(s["avg_jct_s"]), _h(s["p99_jct_s"]), _h(waits.get("urgent")),
            _h(waits.get("low")), _f(s["max_rho"], 1), _f(s["p95_rho"], 1), _f(s["jain"]),
            _f(s["utilization"]), _f(s["preemptions_per_job"]), _h(s["redone_gpu_s"]),
            _f(s["eta_mape"]), _f(s["eta_coverage_80"]), f"{wall:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster", default=REFERENCE_CLUSTER)
    args = parser.parse_args()
    gpus = parse_cluster(args.cluster)
    rows = []
    for load in ("light", "overloaded"):
        trace = generate(args.jobs, load, args.seed, cluster=args.cluster)
        for name, make in POLICIES.items():
            start = time.perf_counter()
            summary = summarise(simulate(trace, gpus, make()))
            rows.append(row(f"{load} ({args.jobs})", summary, time.perf_counter() - start))
            print(" ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(str(r[i])) for r in (HEADER, *rows)) for i in range(len(HEADER))]
    print(f"cluster {args.cluster}, seed {args.seed}")
    for r in (HEADER, *rows):
        print("  ".join(str(v).rjust(w) for v, w in zip(r, widths)))


if __name__ == "__main__":
    main()

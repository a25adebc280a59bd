"""Where the idle GPU time goes, and what the critical-path rule gives back: the overloaded
trace replayed under the baselines and yoloq with and without the rule, side by side.

    python bench/tail.py [--jobs 1200] [--seeds 2,4] [--out bench/out/tail] [--no-eta]

Seeds 2 and 4 are held out: the rule's share (`critical_path_share`) and the finish-time
fairness power (`ftf_weight_power`) were chosen on seeds 0, 1 and 3. For each seed it prints
one table (average JCT over LAS's, urgent p99 wait, utilisation, makespan, ETA 80% coverage,
per-team finish-time fairness max and p95, preemptions per job) and writes
`utilisation-seed<S>.png` into `--out` (not committed): busy GPUs / all GPUs per simulated
hour, one line per policy, the last arrival marked. The last line of output is a JSON
object: seed -> policy -> figures.

- `yoloq (no critical path)`: the default with `critical_path_share=0` and no gang
  reservations (reservations are made for critical gangs only): before.
- `yoloq (no finish-time fairness)`: the default with `ftf_weight_power=0`: fair share by
  usage alone, without the projected finish-time-fairness term.
- `yoloq`: `Policy()`, the default (after).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from work_pools.policy.baselines import fifo, las, yoloq  # noqa: E402
from work_pools.simulate import (REFERENCE_CLUSTER, make_trace, parse_cluster,  # noqa: E402
                                 simulate, summarise)

POLICIES = {"fifo": fifo, "las": las,
            "yoloq (no critical path)": lambda: yoloq(name="yoloq-no-critical-path",
                                                      critical_path_share=0.0,
                                                      backfill_reservations=False),
            "yoloq (no finish-time fairness)": lambda: yoloq(name="yoloq-no-ftf",
                                                             ftf_weight_power=0.0),
            "yoloq": yoloq}
HEADER = ("policy", "avg JCT h", "vs LAS", "urgent p99 s", "util", "makespan ks", "ETA cov80",
          "team FTF max", "team FTF p95", "preempt/job")


def figures(summary: dict, las_jct: float) -> dict:
    return {"avg_jct_h": summary["avg_jct_s"] / 3600, "vs_las": summary["avg_jct_s"] / las_jct,
            "urgent_p99_s": summary["wait_p99_s_by_tier"].get("urgent"),
            "utilization": summary["utilization"], "makespan_s": summary["makespan_s"],
            "eta_coverage_80": summary["eta_coverage_80"], "team_ftf_max": summary["team_ftf_max"],
            "team_ftf_p95": summary["team_ftf_p95"],
            "preemptions_per_job": summary["preemptions_per_job"]}


def _cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: dict[str, dict]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for name, f in rows.items():
        cells = (name, _cell(f["avg_jct_h"]), f"{f['vs_las']:.2f}x", _cell(f["urgent_p99_s"], 0),
                 _cell(f["utilization"], 3), f"{f['makespan_s'] / 1000:.0f}",
                 _cell(f["eta_coverage_80"]), _cell(f["team_ftf_max"]),
                 _cell(f["team_ftf_p95"], 1), _cell(f["preemptions_per_job"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(curves: dict[str, list[float]], gpus: int, last_arrival_h: float, path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for name, busy in curves.items():
        ax.plot(range(len(busy)), [b / (3600 * gpus) for b in busy], label=name, linewidth=1)
    ax.axvline(last_arrival_h, color="grey", linestyle="--", linewidth=0.8, label="last arrival")
    ax.set_xlabel("simulated hour")
    ax.set_ylabel("busy GPUs / all GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1200)
    parser.add_argument("--seeds", default="2,4")
    parser.add_argument("--cluster", default=REFERENCE_CLUSTER)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "tail"))
    parser.add_argument("--no-eta", action="store_true", help="skip ETAs (faster; no coverage)")
    args = parser.parse_args()
    gpus = parse_cluster(args.cluster)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    every: dict[str, dict] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        trace = make_trace("overloaded", args.jobs, seed, cluster=args.cluster)
        summaries, curves = {}, {}
        for name, make in POLICIES.items():
            started = time.perf_counter()
            result = simulate(trace, gpus, make(), eta=not args.no_eta)
            summaries[name], curves[name] = summarise(result), result.busy_by_hour
            print(f"  seed {seed} {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)
        las_jct = summaries["las"]["avg_jct_s"]
        rows = {name: figures(s, las_jct) for name, s in summaries.items()}
        every[str(seed)] = rows
        print(f"\n### overloaded, {len(trace)} jobs, seed {seed}, cluster {args.cluster}\n")
        print(table(rows))
        picture = out / f"utilisation-seed{seed}.png"
        plot(curves, len(gpus), trace[-1].submit_time / 3600, picture,
             f"GPU utilisation per hour, overloaded trace seed {seed}")
        print(f"\nutilisation curve: {picture}")
    print(json.dumps(every, sort_keys=True))


if __name__ == "__main__":
    main()

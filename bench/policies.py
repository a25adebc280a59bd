"""Replay every trace shape under every policy on the reference cluster: one table per
shape, then the goals of issue 13 checked on every shape.

    python bench/policies.py [--jobs 800] [--seed 0] [--cluster 8xA100-80GB,8xV100-32GB]
                             [--shapes light,overloaded,...] [--markdown] [--ablation]

Policies: the baselines fifo, priority, las; yoloq (`Policy()`, the default the live
scheduler gets without settings); the variants yoloq-1h-aging (the previous defaults)
and yoloq-soft (soft preemption on). Rows are sorted by average JCT (strongest first).

Columns: average JCT (hours) and over LAS's; p99 JCT (hours); makespan (thousands of
seconds); per-team finish-time fairness (the worst team's total JCT over its total JCT
on an equal share, and the worst team's p95 job rho); urgent and low p99 queueing delay (seconds /
hours); Themis finish-time fairness max and p95 (N = jobs in the system over the
job's life); max slowdown; Jain's index; GPU utilisation; GPU-hours idle while a
waiting job would have fitted; preemptions and throttles per job; ETA 80%
coverage and median relative error (calibrated, as shown; raw forward run in
brackets); replay seconds.

`--ablation` instead replays the overloaded shape with yoloq's changes switched on one
at a time (what each bought), from the previous yoloq (tiers, 1 h aging, teams taking
turns, submission order inside a team, strict minimum runtime, no critical path), then
the default without its minimum runtime (what the anti-thrash rule is worth) and with soft
preemption.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from work_pools.policy.baselines import POLICIES, VARIANTS, yoloq  # noqa: E402
from work_pools.simulate import (REFERENCE_CLUSTER, SHAPES, make_trace, parse_cluster,  # noqa: E402
                                 simulate, summarise)

HEADER = ("policy", "avgJCT h", "vs LAS", "p99JCT h", "makespan ks", "team FTF max",
          "team FTF p95", "urg p99 s", "low p99 h", "themis max", "themis p95",
          "max slowdown", "jain", "util", "idle-waiting GPUh", "preempt/job", "throttle/job",
          "ETA cov80 (raw)", "ETA err (raw)", "sim s")
BASELINES = ("fifo", "priority", "las")


def _h(seconds):
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _f(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def row(s: dict, wall: float, las_jct_s: float | None = None) -> tuple:
    waits = s["wait_p99_s_by_tier"]
    urgent = waits.get("urgent")
    vs_las = "-" if not las_jct_s else f"{s['avg_jct_s'] / las_jct_s:.2f}x"
    return (s["policy"], _h(s["avg_jct_s"]), vs_las, _h(s["p99_jct_s"]),
            f"{s['makespan_s'] / 1000:.0f}", _f(s["team_ftf_max"]), _f(s["team_ftf_p95"], 1),
            "-" if urgent is None else f"{urgent:.0f}", _h(waits.get("low")),
            _f(s["themis_max_rho"], 1), _f(s["themis_p95_rho"], 1), _f(s["max_slowdown"], 0),
            _f(s["jain"]), _f(s["utilization"], 3), _h(s["idle_while_waiting_gpu_s"]),
            _f(s["preemptions_per_job"]), _f(s["throttles"] / max(1, s["jobs"])),
            f"{_f(s['eta_coverage_80'])} ({_f(s['eta_raw_coverage_80'])})",
            f"{_f(s['eta_mape'])} ({_f(s['eta_raw_mape'])})", f"{wall:.0f}")


def goals(shape: str, results: dict[str, dict]) -> list[tuple[str, str, bool | None]]:
    """Issue 13's goal table for one shape: (figure, value, met; None = shown, no goal).
    The JCT goal is stated for the overloaded trace; other shapes show the ratio."""
    ours = results["yoloq"]
    base = [results[b] for b in BASELINES]
    out = []
    ratio = ours["avg_jct_s"] / results["las"]["avg_jct_s"]
    out.append(("avg JCT yoloq / LAS <= 0.9 (overloaded)", f"{ratio:.2f}",
                ratio <= 0.9 if shape == "overloaded" else None))
    urgent = ours["wait_p99_s_by_tier"].get("urgent")
    out.append(("urgent p99 wait <= 300 s", "-" if urgent is None else f"{urgent:.0f} s",
                urgent is None or urgent <= 300))
    best = max(b["utilization"] for b in base)
    out.append(("utilisation within 0.02 of the best baseline",
                f"{ours['utilization']:.3f} vs {best:.3f}", ours["utilization"] >= best - 0.02))
    cov = ours["eta_coverage_80"]
    out.append(("ETA 80% coverage in [0.75, 0.90]", _f(cov, 3),
                cov is not None and 0.75 <= cov <= 0.90))
    err = ours["eta_mape"]
    out.append(("ETA median relative error <= 0.30", _f(err), err is not None and err <= 0.30))
    themis = ours["themis_max_rho"]
    others = min(results["fifo"]["themis_max_rho"], results["priority"]["themis_max_rho"])
    out.append(("Themis max below fifo's and priority's", f"{themis:.1f} vs {others:.1f}",
                themis < others))
    return out


def _table(rows: list[tuple], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(r[i])) for r in (HEADER, *rows)) for i in range(len(HEADER))]
    return "\n".join("  ".join(str(v).rjust(w) for v, w in zip(r, widths)) for r in (HEADER, *rows))


def run_shape(shape: str, args, gpus) -> tuple[list[tuple], dict[str, dict]]:
    trace = make_trace(shape, args.jobs, args.seed, cluster=args.cluster)
    results, walls = {}, {}
    for name, make in {**POLICIES, **VARIANTS}.items():
        start = time.perf_counter()
        results[name] = summarise(simulate(trace, gpus, make()))
        walls[name] = time.perf_counter() - start
        print(f"  {shape} {name}: {walls[name]:.0f} s", file=sys.stderr, flush=True)
    las_jct = results["las"]["avg_jct_s"]
    rows = sorted((s["avg_jct_s"], row(s, walls[n], las_jct)) for n, s in results.items())
    return [r for _, r in rows], results


_BEFORE_TAIL = dict(critical_path_share=0.0, backfill_reservations=False)
_BEFORE_FTF = dict(ftf_weight_power=0.0)
_BEFORE_WEIGHTS = dict(fair_weight_power=3.0, srpt_aging_s=3600.0, **_BEFORE_FTF)  # the defaults until the last rows
ABLATION = (
    ("previous yoloq", dict(**_BEFORE_WEIGHTS, within_rank="submit", fair_share_mode="turns", aging_step_s=3600.0,
                            urgent_overrides_min_runtime=False, **_BEFORE_TAIL)),
    ("+ SRPT within a rank", dict(**_BEFORE_WEIGHTS, fair_share_mode="turns", aging_step_s=3600.0,
                                  urgent_overrides_min_runtime=False, **_BEFORE_TAIL)),
    ("+ fair share as an SRPT weight", dict(**_BEFORE_WEIGHTS, aging_step_s=3600.0,
                                            urgent_overrides_min_runtime=False, **_BEFORE_TAIL)),
    ("+ 5-minute tier aging", dict(**_BEFORE_WEIGHTS, urgent_overrides_min_runtime=False, **_BEFORE_TAIL)),
    ("+ urgent overrides min runtime", dict(**_BEFORE_WEIGHTS, **_BEFORE_TAIL)),
    ("+ critical path first, on the fastest GPUs", dict(**_BEFORE_WEIGHTS, backfill_reservations=False)),
    ("+ gang reservations", dict(_BEFORE_WEIGHTS)),
    ("+ fair-share power 1.5, 4 h SRPT aging", dict(_BEFORE_FTF)),
    ("+ finish-time fairness (= yoloq, the default)", {}),
    ("yoloq with min_runtime_s=0 (no anti-thrash)", dict(min_runtime_s=0.0)),
    ("yoloq + soft preemption (= yoloq-soft)", dict(soft_preemption=True)),
)


def ablation(args, gpus) -> None:
    trace = make_trace("overloaded", args.jobs, args.seed, cluster=args.cluster)
    rows = []
    las_jct = summarise(simulate(trace, gpus, POLICIES["las"]()))["avg_jct_s"]
    for label, changes in ABLATION:
        start = time.perf_counter()
        summary = summarise(simulate(trace, gpus, yoloq(**changes)))
        rows.append((label, *row(summary, time.perf_counter() - start, las_jct)[1:]))
        print(f"  {label}: {rows[-1][-1]} s", file=sys.stderr, flush=True)
    print(f"### overloaded ({len(trace)} jobs): yoloq's changes one at a time "
          f"(LAS avg JCT {las_jct / 3600:.2f} h)\n")
    print(_table(rows, args.markdown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster", default=REFERENCE_CLUSTER)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--ablation", action="store_true")
    args = parser.parse_args()
    gpus = parse_cluster(args.cluster)
    if args.ablation:
        ablation(args, gpus)
        return
    started = time.perf_counter()
    print(f"cluster {args.cluster}, {args.jobs} jobs per shape (urgent-bursts adds its bursts), "
          f"seed {args.seed}")
    scorecard = []
    for shape in args.shapes.split(","):
        rows, results = run_shape(shape, args, gpus)
        print(f"\n### {shape} ({results['yoloq']['jobs']} jobs)\n")
        print(_table(rows, args.markdown))
        scorecard += [(shape, *g) for g in goals(shape, results)]
    print("\n### goals (issue 13), yoloq on every shape\n")
    goal_rows = [(shape, figure, value, "-" if ok is None else "met" if ok else "NOT met")
                 for shape, figure, value, ok in scorecard]
    widths = [max(len(r[i]) for r in goal_rows) for i in range(4)]
    for r in goal_rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

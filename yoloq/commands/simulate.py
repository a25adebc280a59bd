"""`yoloq simulate`: replay a job trace through a scheduling policy, or generate one.

    yoloq simulate TRACE --cluster 8xA100-80GB,4xV100-32GB --policy yoloq [--json]
    yoloq simulate --generate OUT [--jobs N] [--load light|overloaded] [--shape SHAPE] [--seed S]

No Prefect, no torch: only the pure scheduling core in simulated time.
"""

from __future__ import annotations

import argparse
import json
import math

from yoloq.base.errors import UserError

_POLICY_NAMES = ("fifo", "priority", "las", "yoloq", "yoloq-defaults", "yoloq-1h-aging", "yoloq-soft")
_SHAPES = ("light", "overloaded", "sustained", "urgent-bursts", "flood")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="?", help="CSV trace (yoloq or Tiresias columns)")
    parser.add_argument("--cluster", default=None,
                        help="GPUs: COUNTxTYPE,... or a YAML/JSON file (default 8xA100-80GB,8xV100-32GB)")
    parser.add_argument("--policy", default="yoloq", choices=_POLICY_NAMES)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--segment-s", type=float, default=600.0,
                        help="segment length in simulated seconds (default 600)")
    parser.add_argument("--weights", default="",
                        help="team fair-share weights, e.g. vision=2,research=1 (default 1 each)")
    parser.add_argument("--no-eta", action="store_true", help="skip wait-time estimates (faster)")
    parser.add_argument("--generate", metavar="OUT", help="write a Philly-like trace to OUT")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to generate (default 2000)")
    parser.add_argument("--load", default="overloaded", choices=("light", "overloaded"))
    parser.add_argument("--shape", choices=_SHAPES,
                        help="a trace shape (overrides --load): " + ", ".join(_SHAPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default="", metavar="TASK=SHARE,...",
                        help="with --generate: mix tasks, e.g. detect=0.6,segment=0.2,pose=0.1,classify=0.1 "
                             "(memory and duration scaled by each task's factors; default: detection only)")


def run(args: argparse.Namespace) -> int:
    from work_pools.simulate import REFERENCE_CLUSTER, make_trace, write_trace

    _check_segment_s(args.segment_s)
    if args.generate:
        if args.jobs < 1:
            raise UserError("--jobs", "must be at least 1", "e.g. --jobs 2000")
        shape = args.shape or args.load
        jobs = make_trace(shape, args.jobs, args.seed)
        shares = _task_shares(args.tasks)
        if shares:
            from work_pools.simulate.generate import mix_tasks

            jobs = mix_tasks(jobs, shares, args.seed)
        write_trace(args.generate, jobs)
        mixed = f", tasks {','.join(shares)}" if shares else ""
        print(f"wrote {len(jobs)} jobs ({shape}, seed {args.seed}{mixed}) to {args.generate}")
        return 0
    if not args.trace:
        raise UserError("trace", "no trace given", "pass a CSV trace, or --generate OUT to make one")
    return _replay(args, args.cluster or REFERENCE_CLUSTER)


def _replay(args: argparse.Namespace, cluster: str) -> int:
    from work_pools.policy import policy_by_name
    from work_pools.simulate import parse_cluster, read_trace, simulate, summarise
    from work_pools.simulate.trace import unfit_jobs

    policy = policy_by_name(args.policy, team_weights=_weights(args.weights),
                            segment_s=args.segment_s)
    jobs, gpus = read_trace(args.trace), parse_cluster(cluster)
    unfit = unfit_jobs(jobs, gpus)
    if unfit:
        more = f" (and {len(unfit) - 1} more)" if len(unfit) > 1 else ""
        raise UserError("trace", f"{unfit[0]}{more}: it could never start",
                        "drop such jobs or give a larger --cluster")
    result = simulate(jobs, gpus, policy, segment_s=args.segment_s, eta=not args.no_eta)
    summary = summarise(result)
    print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
    return 0


def _check_segment_s(value: float) -> None:
    """A non-positive or infinite segment length would never advance simulated time."""
    if not math.isfinite(value) or value < 1:
        raise UserError("--segment-s", f"must be a number of seconds >= 1, not {value:g}",
                        "e.g. --segment-s 600")


def _task_shares(text: str) -> dict[str, float]:
    """`--tasks detect=0.6,segment=0.4` -> {task: share}; each a task yoloq trains, share > 0."""
    from yoloq.domain.tasks import TRAINED_TASKS

    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        task, _, value = part.partition("=")
        task = task.strip()
        if task not in TRAINED_TASKS:
            raise UserError("--tasks", f"unknown task {task!r}", f"use tasks from {', '.join(TRAINED_TASKS)}")
        try:
            shares[task] = float(value)
        except ValueError:
            raise UserError("--tasks", f"cannot read {part!r}", "write task=share,...") from None
        if not math.isfinite(shares[task]) or shares[task] <= 0:
            raise UserError("--tasks", f"cannot read {part!r}", "write task=share with share > 0")
    return shares


def _weights(text: str) -> dict[str, float]:
    weights = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        team, sep, value = part.partition("=")
        try:
            weights[team.strip()] = float(value)
        except ValueError:
            raise UserError("--weights", f"cannot read {part!r}", "write team=weight,...") from None
        if not sep or weights[team.strip()] <= 0:
            raise UserError("--weights", f"cannot read {part!r}", "write team=weight with weight > 0")
    return weights


def format_summary(summary: dict) -> str:
    def num(value, unit=""):
        return "-" if value is None else f"{value:,.2f}{unit}" if isinstance(value, float) \
            else f"{value}{unit}"

    lines = [f"policy {summary['policy']}: {summary['finished']}/{summary['jobs']} jobs finished"
             + (f", {summary['unschedulable']} unschedulable" if summary["unschedulable"] else "")]
    rows = [("JCT avg / p50 / p99", f"{num(summary['avg_jct_s'], ' s')} / "
             f"{num(summary['p50_jct_s'], ' s')} / {num(summary['p99_jct_s'], ' s')}"),
            ("Themis finish-time fairness max / p95",
             f"{num(summary['themis_max_rho'])} / {num(summary['themis_p95_rho'])}"),
            ("slowdown max / p95", f"{num(summary['max_slowdown'])} / {num(summary['p95_slowdown'])}"),
            ("Jain (team share vs entitlement)", num(summary["jain"])),
            ("GPU utilisation", num(summary["utilization"])),
            ("makespan (first submit to last finish)", num(summary["makespan_s"], " s")),
            ("team finish-time fairness max / p95",
             f"{num(summary['team_ftf_max'])} / {num(summary['team_ftf_p95'])}"),
            ("GPU time idle while a job fitted", num(summary["idle_while_waiting_gpu_s"], " s")),
            ("preemptions per job", num(summary["preemptions_per_job"])),
            ("GPU time redone", num(summary["redone_gpu_s"], " s")),
            ("throttles (soft preemption)", num(summary["throttles"])),
            ("ETA median relative error (raw)",
             f"{num(summary['eta_mape'])} ({num(summary['eta_raw_mape'])})"),
            ("ETA 80% interval coverage (raw)",
             f"{num(summary['eta_coverage_80'])} ({num(summary['eta_raw_coverage_80'])})")]
    for tier, p50 in summary["wait_p50_s_by_tier"].items():
        rows.append((f"wait {tier} p50 / p99",
                     f"{num(p50, ' s')} / {num(summary['wait_p99_s_by_tier'][tier], ' s')}"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(lines + [f"  {label:<{width}}  {value}" for label, value in rows])

"""Trace shapes users meet, built on the Philly-like generator (`generate`).

- `light`: a light day, offered load 0.5 of the cluster, bursty arrivals.
- `overloaded`: offered load 1.3, bursty arrivals (the generator's default).
- `sustained`: offered load 1.1 with steady Poisson arrivals: the queue never drains.
- `urgent-bursts`: the overloaded trace, plus every 4 h a burst of 8 urgent jobs
  (short, 1-2 GPUs) within 10 minutes, as when a production model breaks.
- `flood`: four teams; one ("flood") submits 70% of the jobs, at load 1.3.

Every shape is reproducible from (jobs, seed); job ids stay unique.
"""

from __future__ import annotations

import random
from dataclasses import replace

from work_pools.simulate.generate import REFERENCE_CLUSTER, generate
from work_pools.simulate.trace import TraceJob
from yoloq.domain.tiers import Tier

SHAPES = ("light", "overloaded", "sustained", "urgent-bursts", "flood")
FLOOD_TEAMS = (("flood", 0.70), ("vision", 0.10), ("robotics", 0.10), ("research", 0.10))
BURST_EVERY_S, BURST_JOBS, BURST_SPAN_S = 4 * 3600.0, 8, 600.0


def make_trace(shape: str, jobs: int, seed: int = 0,
               cluster: str = REFERENCE_CLUSTER) -> list[TraceJob]:
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}")
    if shape in ("light", "overloaded"):
        return generate(jobs, shape, seed, cluster)
    if shape == "sustained":
        return _steady(generate(jobs, "overloaded", seed, cluster), 1.1 / 1.3, seed)
    if shape == "urgent-bursts":
        return _with_urgent_bursts(generate(jobs, "overloaded", seed, cluster), seed)
    return _flood(generate(jobs, "overloaded", seed, cluster), seed)


def _steady(trace: list[TraceJob], load_factor: float, seed: int) -> list[TraceJob]:
    """Same jobs, Poisson arrivals at the trace's mean rate scaled by `load_factor`."""
    rng = random.Random(seed + 101)
    span = trace[-1].submit_time - trace[0].submit_time
    rate = len(trace) / max(span, 1.0) * load_factor
    t, out = 0.0, []
    for job in trace:
        t += rng.expovariate(rate)
        out.append(replace(job, submit_time=round(t, 1)))
    return out


def _with_urgent_bursts(trace: list[TraceJob], seed: int) -> list[TraceJob]:
    rng = random.Random(seed + 202)
    end = trace[-1].submit_time
    extra, n, at = [], 0, BURST_EVERY_S / 2
    while at < end:
        for _ in range(BURST_JOBS):
            duration = round(rng.uniform(300, 2400), 1)
            extra.append(TraceJob(f"u{n:05d}", "oncall", Tier.URGENT,
                                  round(at + rng.uniform(0, BURST_SPAN_S), 1), rng.choice((1, 1, 2)),
                                  round(rng.uniform(4, 18), 1), duration,
                                  max(1, round(duration / 300)), "yolov8s"))
            n += 1
        at += BURST_EVERY_S
    return sorted(trace + extra, key=lambda j: (j.submit_time, j.job_id))


def _flood(trace: list[TraceJob], seed: int) -> list[TraceJob]:
    rng = random.Random(seed + 303)
    out = []
    for job in trace:
        roll, total, team = rng.random(), 0.0, FLOOD_TEAMS[-1][0]
        for name, share in FLOOD_TEAMS:
            total += share
            if roll < total:
                team = name
                break
        out.append(replace(job, team=team))
    return out

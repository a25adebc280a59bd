"""Philly-like synthetic traces (`yoloq simulate --generate OUT`).

Shape, after the published Philly/Helios analyses:
- durations: log-normal, median 30 min, sigma 1.5 (heavy tail), clipped to
  [1 min, 2 days] on a V100-class GPU; about two thirds are short (<= 1 h);
- GPUs per job: 1 (80%), 2 (10%), 4 (7%), 8 (3%) - gangs;
- models: yolov8n/s/m/l/x (30/30/20/12/8%), memory 4/7/12/18/26 GB per GPU
  (+-20%); an epoch is about 5 minutes (epochs = duration / 300, 1-300);
- teams: vision 45%, robotics 35%, research 20%; tiers: urgent 5%, high 15%,
  normal 50%, low 30%;
- arrivals: bursty, a two-state Markov-modulated Poisson process: bursts (rate
  x3) a quarter of the time, calm (rate x1/3) otherwise, state lengths
  exponential with mean 2 h (burst) and 6 h (calm);
- load: the mean arrival rate is set so the offered work (GPUs x duration /
  GPU speed) is 0.5 (light) or 1.3 (overloaded) of the reference cluster's
  capacity (`REFERENCE_CLUSTER`) over the trace.
"""

from __future__ import annotations

import math
import random

from work_pools.simulate.trace import TraceJob
from yoloq.domain.gpus import lookup
from yoloq.domain.tiers import Tier

REFERENCE_CLUSTER = "8xA100-80GB,8xV100-32GB"
LOADS = {"light": 0.5, "overloaded": 1.3}
DURATION_MEDIAN_S, DURATION_SIGMA = 1800.0, 1.5
DURATION_RANGE_S = (60.0, 2 * 86400.0)
GPU_COUNTS = ((1, 0.80), (2, 0.10), (4, 0.07), (8, 0.03))
MODELS = (("yolov8n", 0.30, 4.0), ("yolov8s", 0.30, 7.0), ("yolov8m", 0.20, 12.0),
          ("yolov8l", 0.12, 18.0), ("yolov8x", 0.08, 26.0))
TEAMS = (("vision", 0.45), ("robotics", 0.35), ("research", 0.20))
TIERS = ((Tier.URGENT, 0.05), (Tier.HIGH, 0.15), (Tier.NORMAL, 0.50), (Tier.LOW, 0.30))
BURST = (3.0, 2 * 3600.0)  # rate factor, mean state length
CALM = (1.0 / 3.0, 6 * 3600.0)


def generate(jobs: int = 2000, load: str = "overloaded", seed: int = 0,
             cluster: str = REFERENCE_CLUSTER) -> list[TraceJob]:
    if load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}")
    rng = random.Random(seed)
    shapes = [_job_shape(rng) for _ in range(jobs)]
    capacity = _capacity(cluster)
    mean_work = sum(g * d for g, d, *_ in shapes) / len(shapes)
    rate = LOADS[load] * capacity / mean_work  # jobs per second
    times = _arrivals(rng, jobs, rate)
    return [TraceJob(f"j{i:05d}", team, tier, round(t, 1), g, mem, round(d, 1), epochs, model)
            for i, (t, (g, d, mem, epochs, model, team, tier)) in enumerate(zip(times, shapes))]


def _pick(rng: random.Random, table):
    roll, total = rng.random(), 0.0
    for row in table:
        total += row[1]
        if roll < total:
            return row
    return table[-1]


def _job_shape(rng: random.Random) -> tuple:
    gpus = _pick(rng, GPU_COUNTS)[0]
    duration = rng.lognormvariate(math.log(DURATION_MEDIAN_S), DURATION_SIGMA)
    duration = min(max(duration, DURATION_RANGE_S[0]), DURATION_RANGE_S[1])
    model, _, mem = _pick(rng, MODELS)
    mem = round(mem * rng.uniform(0.8, 1.2), 1)
    epochs = min(300, max(1, round(duration / 300)))
    return gpus, duration, mem, epochs, model, _pick(rng, TEAMS)[0], _pick(rng, TIERS)[0]


def _capacity(cluster: str) -> float:
    total = 0.0
    for part in cluster.split(","):
        count, _, name = part.strip().partition("x")
        total += int(count) * lookup(name).speed
    return total


def _arrivals(rng: random.Random, jobs: int, rate: float) -> list[float]:
    """Markov-modulated Poisson arrivals with mean `rate`."""
    share_burst = BURST[1] / (BURST[1] + CALM[1])
    norm = share_burst * BURST[0] + (1 - share_burst) * CALM[0]
    times, t = [], 0.0
    state = CALM
    state_end = rng.expovariate(1 / state[1])
    while len(times) < jobs:
        t += rng.expovariate(rate * state[0] / norm)
        while t > state_end:  # switch state; memorylessness lets us keep t
            state = BURST if state is CALM else CALM
            state_end += rng.expovariate(1 / state[1])
        times.append(t)
    return times


def mix_tasks(trace: list[TraceJob], shares: dict[str, float], seed: int = 0) -> list[TraceJob]:
    """The same jobs, each given a task drawn by `shares` (task -> weight): its model named with
    the task's suffix (yolov8n-seg), its memory and duration scaled by the task table's factors
    (`yoloq.domain.tasks`), as admission would estimate them. The draws use their own stream, so
    arrivals and shapes stay the detection trace's; the offered load moves with the factors."""
    from dataclasses import replace

    from yoloq.domain.tasks import TASKS

    rng = random.Random(seed + 202)
    table = tuple((task, weight / sum(shares.values())) for task, weight in shares.items())
    mixed = []
    for job in trace:
        row = TASKS[_pick(rng, table)[0]]
        suffix = row.example.rsplit(".", 1)[0].partition("-")[2]
        mixed.append(replace(job, model=f"{job.model}-{suffix}" if suffix else job.model,
                             gpu_mem_gb=round(job.gpu_mem_gb * row.mem_factor, 1),
                             duration_s=round(job.duration_s * row.time_factor, 1)))
    return mixed

"""Projected finish-time fairness per team (Themis' rho, summed per team), read from a snapshot.

Usage-based fair share holds back a team that submits more work than its weight's share, so
its jobs pile up and finish late against what an equal share of the cluster per job would
give them (the per-team finish-time fairness of `simulate.metrics`). The projection sees
that while it happens. For the jobs of a team in the system (waiting or running):

- projected JCT: time in the system so far, plus when the job would end if the team went on
  getting the GPU rate its decayed usage shows, its jobs taken shortest first (never sooner
  than the job's own remaining time on its GPUs);
- ideal JCT alone on an equal share: duration / (mean GPU speed x min(1, share / GPUs)),
  share = the pool's GPUs x the team's weight / the weights of all jobs in the system
  (Themis' 1/N, weighted like fair share).

A team's rho is the first summed over the second summed. Because the projection uses the rate
the team is actually getting, a team served at its weight with a backlog like the others'
projects like them; a team whose backlog is long for its rate projects worse and is boosted
by `FairQueue.fair_factor` (`ftf_weight_power`).

Each team is compared with the median team's rho, not with all teams' jobs pooled: a team
with nothing running and almost no usage (a pool minutes old, against a day's half-life)
projects a rho thousands of times the others'; pooled, it dragged the reference up with it,
every other team's factor hit the clamp, and their usage no longer told them apart (the
earliest submitted went first). Against the median, the others keep their usage order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from work_pools.policy.columns import Columns
from work_pools.policy.model import Policy
from yoloq.domain.gpus import TU_SECONDS

REFERENCE = "*"  # the key of the reference rho: the median team's


def _concat(running: Columns, waiting: Columns, column: str) -> np.ndarray:
    return np.concatenate((getattr(running, column), getattr(waiting, column)))


def _duration_s(cols: Columns) -> np.ndarray:
    """The job's whole run time at speed 1.0: measured epochs when known, else the estimate."""
    return np.where(cols.measured, cols.measured_epoch_s * cols.epochs, cols.est_remaining_s)


def usage_rate_gpus(usage_tu: float, policy: Policy, mean_speed: float) -> float:
    """The GPUs (of mean speed) a team has been holding lately: decayed usage is the rate
    times half-life / ln 2 in a steady state."""
    if policy.usage_half_life_s <= 0:
        return 0.0
    return usage_tu * TU_SECONDS * math.log(2) / policy.usage_half_life_s / mean_speed


def _projected_s(work: np.ndarray, gpus: np.ndarray, rate_gpus: float,
                 mean_speed: float) -> np.ndarray:
    """Each job's end from now: the team's jobs shortest first at `rate_gpus`."""
    own = work / (gpus * mean_speed)
    if rate_gpus <= 0:
        return np.full(len(work), math.inf)
    order = np.argsort(work, kind="stable")
    ends = np.empty(len(work))
    ends[order] = np.cumsum(work[order]) / (rate_gpus * mean_speed)
    return np.maximum(ends, own)


def team_rho(running: Columns, waiting: Columns, now: float, policy: Policy,
             usage: Mapping[str, float], gpu_count: int, mean_speed: float) -> dict[str, float]:
    """team -> projected rho of its jobs in the system, and `REFERENCE` -> the teams' median."""
    teams = running.teams + waiting.teams
    if not teams or gpu_count <= 0 or mean_speed <= 0:
        return {}
    names = sorted(set(teams))
    code = {team: n for n, team in enumerate(names)}
    codes = np.fromiter(map(code.__getitem__, teams), np.int64, len(teams))
    gpus = np.maximum(_concat(running, waiting, "gpus"), 1.0)
    remaining_work = _concat(running, waiting, "remaining_work")
    weights = np.array([policy.weight(t) for t in names])[codes]
    share = gpu_count * weights / weights.sum()
    duration = np.concatenate((_duration_s(running), _duration_s(waiting)))
    ideal = duration / (mean_speed * np.minimum(1.0, share / gpus))
    elapsed = now - _concat(running, waiting, "submitted_at")
    rho = {}
    for n, team in enumerate(names):
        rows = codes == n
        rate = usage_rate_gpus(usage.get(team, 0.0), policy, mean_speed)
        ends = _projected_s(remaining_work[rows], gpus[rows], rate, mean_speed)
        num, den = float((elapsed[rows] + ends).sum()), float(ideal[rows].sum())
        if den > 0 and math.isfinite(num):
            rho[team] = num / den
    return {**rho, REFERENCE: float(np.median(list(rho.values())))} if rho else rho

"""Metrics of a simulation run.

- JCT (job completion time) = finish - submit: mean, p50/p95/p99.
- Queueing delay = first start - submit, p50/p99 per tier.
- Slowdown = JCT / the job's run time alone on the GPUs it actually ran on (its
  duration at their mean speed): max and p95 (`max_slowdown`, `p95_slowdown`).
  Its maximum is usually the longest wait of a one-minute job.
- Finish-time fairness rho (Themis) = JCT / T_ideal, where T_ideal is the JCT
  the job would have had alone on an equal 1/N share of the cluster:
  T_ideal = duration / (mean GPU speed x min(1, (GPUs / N) / job's GPUs)), and N
  is the number of contending jobs: the time-average number of jobs in the
  system (running, waiting or about to start) over the job's own life, itself
  included. rho <= 1: the job did at least as well as with its equal share.
  Max and p95 (`themis_max_rho` = `max_rho`, `themis_p95_rho` = `p95_rho`).
- Per-team finish-time fairness: a team's total JCT under the policy over its total
  JCT under an equal share (the sum of its jobs' T_ideal above): `team_ftf` (team ->
  ratio), `team_ftf_max` (the worst team), and `team_ftf_p95` (the worst team's p95
  of its jobs' rho). Teams whose work is a few large trainings show up here.
- Jain's index over teams of x = (team's share of the TU used) / (its entitlement
  by weight); 1.0 is perfectly proportional (teams with little demand lower it).
- Utilisation = busy GPU-seconds / (GPUs x span from first submit to last finish).
- Preemptions per job; GPU-seconds redone (work lost since the last checkpoint).
- ETA error, for the estimate made at submit and shown to the user (calibrated,
  see `work_pools.policy.calibrate`): median absolute percentage error of the
  predicted wait (|predicted - actual| / max(actual, 60 s)), and the share of jobs
  whose actual start fell inside the predicted 80% interval (`eta_mape`,
  `eta_coverage_80`); the same for the uncalibrated forward run
  (`eta_raw_mape`, `eta_raw_coverage_80`).
- Work conservation: `idle_while_waiting_gpu_s`, GPU-seconds during which GPUs
  stood free while a waiting job would have fitted on free GPUs of one node.
- `throttles`: soft preemptions (a job shared a lower-tier job's GPU).
"""

from __future__ import annotations

import numpy as np

from work_pools.policy.fairshare import entitlements
from work_pools.simulate.engine import SimResult
from yoloq.domain.tiers import Tier

_WAIT_FLOOR_S = 60.0


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarise(result: SimResult) -> dict:
    done = [j for j in result.jobs if j.finish is not None]
    jct = [j.finish - j.spec.submit_time for j in done]
    slowdown = [(j.finish - j.spec.submit_time) / (j.spec.duration_s / (j.speed_s / j.run_s))
                for j in done if j.run_s > 0]
    rho = themis_rho(result)
    span = (max((j.finish for j in done), default=0.0)
            - min((j.spec.submit_time for j in result.jobs), default=0.0))
    out = {
        "policy": result.policy.name,
        "jobs": len(result.jobs),
        "finished": len(done),
        "unschedulable": len(result.unschedulable),
        "avg_jct_s": float(np.mean(jct)) if jct else None,
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "p99_jct_s": _pct(jct, 99),
        **_waits_by_tier(result),
        "max_rho": max(rho) if rho else None,
        "p95_rho": _pct(rho, 95),
        "themis_max_rho": max(rho) if rho else None,
        "themis_p95_rho": _pct(rho, 95),
        "max_slowdown": max(slowdown) if slowdown else None,
        "p95_slowdown": _pct(slowdown, 95),
        "jain": _jain(result),
        "utilization": result.busy_gpu_s / (len(result.gpus) * span) if span > 0 else None,
        "idle_while_waiting_gpu_s": result.idle_while_waiting_gpu_s,
        "throttles": result.throttles,
        "preemptions_per_job": sum(j.preemptions for j in result.jobs) / max(1, len(result.jobs)),
        "redone_gpu_s": sum(j.redone_gpu_s for j in result.jobs),
        **_eta_errors(result),
        "makespan_s": span,
        **_team_ftf(result),
    }
    return out


def themis_rho(result: SimResult) -> list[float]:
    """Finish-time fairness per finished job (see the module docstring)."""
    return [jct / ideal for _, jct, ideal in _equal_share(result)]


def _equal_share(result: SimResult) -> list[tuple[str, float, float]]:
    """(team, JCT, JCT alone on an equal 1/N share) per finished job."""
    gpus = len(result.gpus)
    mean_speed = sum(g.speed for g in result.gpus) / gpus
    out = []
    for j in result.jobs:
        if j.finish is None or j.finish <= j.spec.submit_time:
            continue
        jct = j.finish - j.spec.submit_time
        contending = max(1.0, (j.in_system_at_finish - j.in_system_at_submit) / jct)
        share = min(1.0, (gpus / contending) / j.spec.gpus)
        out.append((j.spec.team, jct, j.spec.duration_s / (mean_speed * share)))
    return out


def _team_ftf(result: SimResult) -> dict:
    """Per-team finish-time fairness (see the module docstring)."""
    jct: dict[str, float] = {}
    ideal: dict[str, float] = {}
    rhos: dict[str, list[float]] = {}
    for team, job_jct, job_ideal in _equal_share(result):
        jct[team] = jct.get(team, 0.0) + job_jct
        ideal[team] = ideal.get(team, 0.0) + job_ideal
        rhos.setdefault(team, []).append(job_jct / job_ideal)
    ratios = {team: jct[team] / ideal[team] for team in sorted(jct) if ideal[team] > 0}
    return {"team_ftf": ratios,
            "team_ftf_max": max(ratios.values()) if ratios else None,
            "team_ftf_p95": max((_pct(r, 95) for r in rhos.values()), default=None)}


def _waits_by_tier(result: SimResult) -> dict:
    p50, p99 = {}, {}
    for tier in Tier:
        waits = [j.first_start - j.spec.submit_time for j in result.jobs
                 if j.spec.tier == tier and j.first_start is not None]
        if waits:
            p50[tier.label], p99[tier.label] = _pct(waits, 50), _pct(waits, 99)
    return {"wait_p50_s_by_tier": p50, "wait_p99_s_by_tier": p99}


def _jain(result: SimResult) -> float | None:
    teams = sorted({j.spec.team for j in result.jobs})
    total = sum(result.team_tu.values())
    if not teams or total <= 0:
        return None
    owed = entitlements(teams, result.policy)
    x = [(result.team_tu.get(t, 0.0) / total) / owed[t] for t in teams]
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


def _eta_errors(result: SimResult) -> dict:
    shown = _eta_scores(result, "eta")
    raw = _eta_scores(result, "eta_raw")
    return {"eta_mape": shown[0], "eta_coverage_80": shown[1],
            "eta_raw_mape": raw[0], "eta_raw_coverage_80": raw[1]}


def _eta_scores(result: SimResult, field: str) -> tuple[float | None, float | None]:
    ape, covered = [], []
    for j in result.jobs:
        eta = getattr(j, field)
        if eta is None or j.first_start is None:
            continue
        actual = j.first_start - j.spec.submit_time
        predicted = eta.start_s - j.spec.submit_time
        ape.append(abs(predicted - actual) / max(actual, _WAIT_FLOOR_S))
        covered.append(eta.start_low_s - 1 <= j.first_start <= eta.start_high_s + 1)
    return (float(np.median(ape)) if ape else None,
            sum(covered) / len(covered) if covered else None)

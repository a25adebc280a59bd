"""Policies for comparison, all run by the same `decide`.

- `fifo`: submission order, no preemption, no fairness (backfills what fits).
- `priority`: strict tiers with preemption; no fair share, no aging, no 70% rule.
- `las`: Tiresias-style discretised 2D least-attained-service: attained service
  is GPUs x seconds run; queues split at `las_thresholds_gpu_s`; a lower queue
  preempts a higher one; submission order inside a queue; tiers are ignored.
- `yoloq`: everything (tiers, aging, fair share, quotas, the 70% rule, SRPT within
  a rank weighted by fair share), tuned: tiers age every 5 minutes (`YOLOQ_TUNED`:
  tiers order the next minutes, remaining work orders the hours) and an urgent
  segment may preempt inside the minimum runtime when nothing else frees a GPU.
- `yoloq_defaults`: `Policy()` as the live worker gets it without settings (1 h aging,
  strict minimum runtime), for comparison.
- `yoloq_soft`: `yoloq` with soft preemption (throttle instead of evict).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from work_pools.policy.model import Policy

_NO_EXTRAS = dict(fair_share=False, aging_step_s=0.0, long_job_share=0.0, fairshare_preempt_over=0.0,
                  within_rank="submit", urgent_overrides_min_runtime=False)


def fifo(**overrides) -> Policy:
    return replace(Policy(name="fifo", ordering="fifo", preemption=False, **_NO_EXTRAS), **overrides)


def priority(**overrides) -> Policy:
    return replace(Policy(name="priority", ordering="tier", **_NO_EXTRAS), **overrides)


def las(**overrides) -> Policy:
    return replace(Policy(name="las", ordering="las", **_NO_EXTRAS), **overrides)


YOLOQ_TUNED = dict(aging_step_s=300.0, urgent_overrides_min_runtime=True)


def yoloq(**overrides) -> Policy:
    return replace(Policy(name="yoloq", **YOLOQ_TUNED), **overrides)


def yoloq_defaults(**overrides) -> Policy:
    return replace(Policy(name="yoloq-defaults"), **overrides)


def yoloq_soft(**overrides) -> Policy:
    return replace(Policy(name="yoloq-soft", soft_preemption=True, **YOLOQ_TUNED), **overrides)


POLICIES: dict[str, Callable[..., Policy]] = {"fifo": fifo, "priority": priority, "las": las,
                                                "yoloq": yoloq}
VARIANTS: dict[str, Callable[..., Policy]] = {"yoloq-defaults": yoloq_defaults,
                                                "yoloq-soft": yoloq_soft}


def policy_by_name(name: str, **overrides) -> Policy:
    every = {**POLICIES, **VARIANTS}
    try:
        return every[name](**overrides)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of: {', '.join(every)}") from None

"""Policies for comparison, all run by the same `decide`.

- `fifo`: submission order, no preemption, no fairness (backfills what fits).
- `priority`: strict tiers with preemption; no fair share, no aging, no 70% rule.
- `las`: Tiresias-style discretised 2D least-attained-service: attained service
  is GPUs x seconds run; queues split at `las_thresholds_gpu_s`; a lower queue
  preempts a higher one; submission order inside a queue; tiers are ignored.
- `yoloq`: `Policy()` exactly as the live scheduler gets it without settings (tiers,
  5-minute aging, fair share, quotas, the 70% rule, SRPT within a rank weighted by fair
  share, urgent work may preempt inside the minimum runtime when nothing else frees a
  GPU). The headline figures are this policy's. `yoloq-defaults` is the same policy
  under its older name.
- `yoloq-1h-aging`: the previous defaults (1 h aging, strict minimum runtime, no
  critical path, no gang reservations), for comparison.
- `yoloq-soft`: `yoloq` with soft preemption (throttle instead of evict), a variant.
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


PREVIOUS_DEFAULTS = dict(aging_step_s=3600.0, urgent_overrides_min_runtime=False,
                         critical_path_share=0.0, backfill_reservations=False,
                         fair_weight_power=3.0, srpt_aging_s=3600.0)


def yoloq(**overrides) -> Policy:
    """The default policy: `Policy()` with nothing changed but its name."""
    return replace(Policy(name="yoloq"), **overrides)


def yoloq_defaults(**overrides) -> Policy:
    """`yoloq` under its older name (kept so `--policy yoloq-defaults` still works)."""
    return replace(Policy(name="yoloq-defaults"), **overrides)


def yoloq_1h_aging(**overrides) -> Policy:
    return replace(Policy(name="yoloq-1h-aging", **PREVIOUS_DEFAULTS), **overrides)


def yoloq_soft(**overrides) -> Policy:
    return replace(Policy(name="yoloq-soft", soft_preemption=True), **overrides)


POLICIES: dict[str, Callable[..., Policy]] = {"fifo": fifo, "priority": priority, "las": las,
                                                "yoloq": yoloq}
VARIANTS: dict[str, Callable[..., Policy]] = {"yoloq-1h-aging": yoloq_1h_aging,
                                                "yoloq-soft": yoloq_soft}
ALIASES: dict[str, Callable[..., Policy]] = {"yoloq-defaults": yoloq_defaults}


def policy_by_name(name: str, **overrides) -> Policy:
    every = {**POLICIES, **VARIANTS, **ALIASES}
    try:
        return every[name](**overrides)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of: {', '.join(every)}") from None

"""The scheduling policy as a Prefect Block (`yoloq-policy`), so admins edit it in the UI.

Resolution (`resolve_policy_settings`; the worker repeats it every 30 s): the saved block when the
API has one, else environment overrides (`YOLOQ_MIN_RUNTIME_S`, `YOLOQ_GRACE_S`,
`YOLOQ_GRACE_EPOCHS`, `YOLOQ_TIER_CAPS="team=high,..."`), else the defaults of
`work_pools.policy.Policy`. A saved block wins over the environment entirely, so
what the UI shows is what the worker uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from prefect.blocks.core import Block
from pydantic import BaseModel, Field, field_validator

from blocks.saved import load_saved
from work_pools.policy.model import Policy, Quota
from yoloq.domain.tiers import Tier

POLICY_BLOCK = "yoloq-policy"
DEFAULT_MIN_GRACE_S = 60.0
DEFAULT_GRACE_EPOCHS = 2.0
_DEFAULTS = Policy()


class TeamQuota(BaseModel):
    """A team's Training Unit budget (1 TU = one V100 for 24 h) per UTC day or ISO week."""

    tu: float = Field(gt=0, description="Training Units the team may spend per period.")
    period: Literal["day", "week"] = Field(default="day", description="Quota period (UTC).")


class SchedulingPolicy(Block):
    """Fair share, quotas, tier caps and preemption settings of the yolo-gpu worker."""

    _block_type_name = "yoloq Scheduling Policy"
    _description = ("How the yolo-gpu worker shares GPUs: team weights, TU quotas, tier caps, "
                    "anti-thrash and aging, the 70% rule, sharing and preemption grace. "
                    "Workers re-read it every 30 s.")

    team_weights: dict[str, float] = Field(
        default_factory=dict, description="Fair-share weight per team (default 1).")
    quotas: dict[str, TeamQuota] = Field(
        default_factory=dict, description="TU budget per team and period; over it, the team's "
                                          "segments run only on GPUs nobody else wants.")
    tier_caps: dict[str, str] = Field(
        default_factory=dict, description="Most urgent tier each team may submit "
                                          "(urgent, high, normal, low).")
    default_tier_cap: str = Field(
        default=_DEFAULTS.default_tier_cap.label,
        description="Most urgent tier for teams not in `tier_caps` (urgent = no limit).")
    min_runtime_s: float = Field(
        default=_DEFAULTS.min_runtime_s, ge=0,
        description="A segment younger than this is never preempted (anti-thrash).")
    aging_step_s: float = Field(
        default=_DEFAULTS.aging_step_s, ge=0,
        description="Waiting this long raises a segment one tier (0 = no aging).")
    long_job_share: float = Field(
        default=_DEFAULTS.long_job_share, ge=0,
        description="A full training that held a GPU more than this share of the window "
                    "yields to short experiments at its next boundary (0 = off).")
    long_job_window_s: float = Field(
        default=_DEFAULTS.long_job_window_s, gt=0, description="Rolling window of the 70% rule.")
    share_gpus: bool = Field(
        default=_DEFAULTS.share_gpus, description="Let small segments share a GPU.")
    allow_reduced_batch: bool = Field(
        default=_DEFAULTS.allow_reduced_batch,
        description="Start a segment with a smaller batch when it fits nowhere "
                    "(breaks exact resume).")
    usage_half_life_s: float = Field(
        default=_DEFAULTS.usage_half_life_s, gt=0,
        description="Half-life of past usage in the fair-share ledger.")
    within_rank: Literal["srpt", "submit"] = Field(
        default=_DEFAULTS.within_rank,
        description="Order inside a tier: srpt = least estimated remaining work first (aged "
                    "by waiting); submit = submission order. (FIFO and LAS are whole "
                    "orderings, compared in `yoloq simulate`, not a within-tier order.)")
    fair_share_mode: Literal["weight", "turns"] = Field(
        default=_DEFAULTS.fair_share_mode,
        description="weight = a team's usage over its share scales its jobs' remaining work; "
                    "turns = teams take turns by usage.")
    soft_preemption: bool = Field(
        default=_DEFAULTS.soft_preemption,
        description="Before evicting, let an urgent job share a lower-tier job's GPU when a "
                    "smaller batch makes both fit: the victim restarts at its next epoch "
                    "boundary with that batch (gradient accumulation keeps the effective "
                    "batch) beside the urgent job (`yoloq simulate --policy yoloq-soft`).")
    urgent_overrides_min_runtime: bool = Field(
        default=_DEFAULTS.urgent_overrides_min_runtime,
        description="An urgent job may preempt a job younger than min_runtime_s, after "
                    "every older victim.")
    min_grace_s: float = Field(
        default=DEFAULT_MIN_GRACE_S, ge=0,
        description="A preemption victim gets at least this long to reach its epoch boundary.")
    grace_epochs: float = Field(
        default=DEFAULT_GRACE_EPOCHS, ge=0,
        description="... or this many estimated epochs, whichever is longer, before a kill.")

    @field_validator("default_tier_cap")
    @classmethod
    def _known_tier(cls, value: str) -> str:
        return Tier.parse(value).label

    @field_validator("tier_caps")
    @classmethod
    def _known_tiers(cls, value: dict[str, str]) -> dict[str, str]:
        return {team: Tier.parse(tier).label for team, tier in value.items()}

    def to_policy(self) -> Policy:
        return Policy(
            team_weights=dict(self.team_weights),
            quotas={team: Quota(q.tu, q.period) for team, q in self.quotas.items()},
            tier_caps={team: Tier.parse(t) for team, t in self.tier_caps.items()},
            default_tier_cap=Tier.parse(self.default_tier_cap),
            min_runtime_s=self.min_runtime_s, aging_step_s=self.aging_step_s,
            long_job_share=self.long_job_share, long_job_window_s=self.long_job_window_s,
            share_gpus=self.share_gpus, allow_reduced_batch=self.allow_reduced_batch,
            usage_half_life_s=self.usage_half_life_s, within_rank=self.within_rank,
            fair_share_mode=self.fair_share_mode, soft_preemption=self.soft_preemption,
            urgent_overrides_min_runtime=self.urgent_overrides_min_runtime)

    @classmethod
    def from_settings(cls, settings: PolicySettings) -> SchedulingPolicy:
        """A block holding what a worker uses now (so saving it changes nothing else)."""
        p = settings.policy
        return cls(team_weights=dict(p.team_weights),
                   quotas={t: TeamQuota(tu=q.tu, period=q.period) for t, q in p.quotas.items()},
                   tier_caps={t: c.label for t, c in p.tier_caps.items()},
                   default_tier_cap=p.default_tier_cap.label, min_runtime_s=p.min_runtime_s,
                   aging_step_s=p.aging_step_s, long_job_share=p.long_job_share,
                   long_job_window_s=p.long_job_window_s, share_gpus=p.share_gpus,
                   allow_reduced_batch=p.allow_reduced_batch, usage_half_life_s=p.usage_half_life_s,
                   within_rank=p.within_rank, fair_share_mode=p.fair_share_mode,
                   soft_preemption=p.soft_preemption,
                   urgent_overrides_min_runtime=p.urgent_overrides_min_runtime,
                   min_grace_s=settings.min_grace_s, grace_epochs=settings.grace_epochs)

    def to_settings(self, source: str) -> PolicySettings:
        return PolicySettings(self.to_policy(), self.min_grace_s, self.grace_epochs, source)


@dataclass(frozen=True)
class PolicySettings:
    """The resolved policy plus the worker's grace knobs, and where they came from."""

    policy: Policy = field(default_factory=Policy)
    min_grace_s: float = DEFAULT_MIN_GRACE_S
    grace_epochs: float = DEFAULT_GRACE_EPOCHS
    source: str = "defaults"  # "block <name>", "environment" or "defaults"


def resolve_policy_settings(block_name: str | None = None) -> PolicySettings:
    """Saved block, else environment overrides, else defaults."""
    name = block_name or os.environ.get("YOLOQ_POLICY_BLOCK") or POLICY_BLOCK
    block = saved_block(name)
    if block is not None:
        return block.to_settings(f"block {name}")
    return settings_from_env()


def load_policy(block_name: str | None = None) -> Policy:
    return resolve_policy_settings(block_name).policy


def saved_block(name: str = POLICY_BLOCK) -> SchedulingPolicy | None:
    """The saved block, or None without an API, with block use turned off, or when unsaved."""
    return load_saved(SchedulingPolicy, name)


def tier_caps() -> dict[str, Tier]:
    """Parse `YOLOQ_TIER_CAPS` (the caps when no block is saved)."""
    caps = {}
    for item in filter(None, (p.strip() for p in os.environ.get("YOLOQ_TIER_CAPS", "").split(","))):
        team, _, tier = item.partition("=")
        caps[team.strip()] = Tier.parse(tier)
    return caps


def settings_from_env() -> PolicySettings:
    """Policy defaults with the worker's environment overrides applied."""
    env = os.environ
    keys = ("YOLOQ_MIN_RUNTIME_S", "YOLOQ_GRACE_S", "YOLOQ_GRACE_EPOCHS", "YOLOQ_TIER_CAPS")
    if not any(env.get(k) for k in keys):
        return PolicySettings()
    policy = Policy(min_runtime_s=float(env.get("YOLOQ_MIN_RUNTIME_S") or _DEFAULTS.min_runtime_s),
                    tier_caps=tier_caps())
    return PolicySettings(policy, float(env.get("YOLOQ_GRACE_S") or DEFAULT_MIN_GRACE_S),
                          float(env.get("YOLOQ_GRACE_EPOCHS") or DEFAULT_GRACE_EPOCHS),
                          "environment")

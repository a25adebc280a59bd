"""The scheduling policy as a Prefect Block (`yoloq-policy`), so admins edit it in the UI.

One source of defaults: `work_pools.policy.Policy` (and `PolicySettings` for the two grace
knobs the node agent applies). The block's defaults and its conversion to and from a Policy
are derived from them; every key of the block can be overridden by one environment variable,
declared in `yoloq.settings` (`min_runtime_s` -> `YOLOQ_MIN_RUNTIME_S`, `min_grace_s` ->
`YOLOQ_GRACE_S`).

Resolution (`resolve_policy_settings`; the scheduler repeats it every 30 s), key by key:
an environment variable set for this process (the stack's processes inherit what `yoloq up`
had) beats the saved block, which beats the defaults. Explicit beats stored. `YOLOQ_TIER_CAPS`
merges team by team over the block's caps. Each key's source is reported (`sources`), so
`yoloq up`, `yoloq policy show` and `GET /v1/policy` say where every value came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from prefect.blocks.core import Block
from pydantic import BaseModel, Field, ValidationError, field_validator

from blocks.saved import load_saved
from work_pools.policy.model import Policy, Quota
from yoloq.domain.tiers import Tier
from yoloq.settings import SettingsError, policy_overrides, settings

POLICY_BLOCK = "yoloq-policy"
DEFAULT_MIN_GRACE_S = 60.0
DEFAULT_GRACE_EPOCHS = 2.0
GRACE_KEYS = ("min_grace_s", "grace_epochs")  # the node agent's knobs, not Policy fields
DEFAULT_SOURCE = "default"
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
        """The pure policy: every block key that is a Policy field, tiers and quotas typed."""
        values = {k: v for k, v in self.values().items() if k not in GRACE_KEYS}
        values["quotas"] = {team: Quota(q["tu"], q["period"]) for team, q in values["quotas"].items()}
        values["tier_caps"] = {team: Tier.parse(t) for team, t in values["tier_caps"].items()}
        values["default_tier_cap"] = Tier.parse(values["default_tier_cap"])
        return Policy(**values)

    @classmethod
    def from_settings(cls, resolved: PolicySettings) -> SchedulingPolicy:
        """A block holding what a worker uses now (so saving it changes nothing else)."""
        return cls(**policy_values(resolved))

    def values(self) -> dict[str, Any]:
        """The policy keys and their values (without the Block's own fields)."""
        return self.model_dump(include=set(policy_keys()))

    def to_settings(self, source: str, sources: dict[str, str] | None = None) -> PolicySettings:
        return PolicySettings(self.to_policy(), self.min_grace_s, self.grace_epochs, source,
                              dict(sources or {}))


def policy_keys() -> tuple[str, ...]:
    """The keys an admin may set (the block's fields), in the block's order."""
    return tuple(k for k in SchedulingPolicy.model_fields if k not in Block.model_fields)


def policy_values(resolved: PolicySettings) -> dict[str, Any]:
    """The block's keys as plain values (tiers by label, quotas as dicts) of a resolved policy."""
    p = resolved.policy
    values: dict[str, Any] = {k: getattr(p, k) for k in policy_keys() if k not in GRACE_KEYS}
    values["quotas"] = {t: {"tu": q.tu, "period": q.period} for t, q in p.quotas.items()}
    values["tier_caps"] = {t: c.label for t, c in p.tier_caps.items()}
    values["default_tier_cap"] = p.default_tier_cap.label
    values["team_weights"] = dict(p.team_weights)
    return {**values, "min_grace_s": resolved.min_grace_s, "grace_epochs": resolved.grace_epochs}


@dataclass(frozen=True)
class PolicySettings:
    """The resolved policy plus the worker's grace knobs, and where they came from."""

    policy: Policy = field(default_factory=Policy)
    min_grace_s: float = DEFAULT_MIN_GRACE_S
    grace_epochs: float = DEFAULT_GRACE_EPOCHS
    source: str = "defaults"  # "defaults", "block <name>", "environment", "block <name> + environment"
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # key -> default|block <name>|env VAR

    def source_of(self, key: str) -> str:
        return self.sources.get(key, DEFAULT_SOURCE)


def resolve_policy_settings(block_name: str | None = None) -> PolicySettings:
    """Key by key: this process's environment overrides, else the saved block, else the defaults."""
    name = block_name or settings().policy_block
    block = saved_block(name)
    stored = f"block {name}" if block is not None else DEFAULT_SOURCE
    values = (block or SchedulingPolicy()).values()
    sources = {key: stored for key in values}
    overrides = env_overrides()
    for key, (env, value) in overrides.items():
        values[key] = {**values[key], **value} if key == "tier_caps" else value
        sources[key] = f"env {env}" if key != "tier_caps" or block is None else f"{stored} + env {env}"
    effective = _validated(values, overrides) if overrides else (block or SchedulingPolicy())
    summary = " + ".join(filter(None, (f"block {name}" if block is not None else "",
                                       "environment" if overrides else ""))) or "defaults"
    return effective.to_settings(summary, sources)


def load_policy(block_name: str | None = None) -> Policy:
    return resolve_policy_settings(block_name).policy


def saved_block(name: str = POLICY_BLOCK) -> SchedulingPolicy | None:
    """The saved block, or None without an API, with block use turned off, or when unsaved."""
    return load_saved(SchedulingPolicy, name)


def env_overrides() -> dict[str, tuple[str, Any]]:
    """Policy key -> (variable, value) for every policy variable set in this process."""
    found = policy_overrides(settings())
    if "tier_caps" in found:
        env, text = found["tier_caps"]
        found["tier_caps"] = (env, parse_tier_caps(env, text))
    return found


def check_env_overrides() -> None:
    """The policy variables of this process, checked against the block's types and ranges alone
    (`yoloq up` calls it before it starts anything; the block is merged in later)."""
    overrides = env_overrides()
    if overrides:
        values = SchedulingPolicy().values()
        for key, (_, value) in overrides.items():
            values[key] = value
        _validated(values, overrides)


def parse_tier_caps(field_name: str, text: str) -> dict[str, str]:
    """`"research=high, interns=normal"` -> {team: tier label}; a bad item names `field_name`."""
    caps = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        team, _, tier = item.partition("=")
        if not team.strip() or not tier.strip():
            raise SettingsError(field_name, f"cannot read {item!r} as team=tier",
                                "write team=tier pairs, e.g. research=high,interns=normal")
        caps[team.strip()] = _tier_label(field_name, tier)
    return caps


def _tier_label(field_name: str, text: str) -> str:
    try:
        return Tier.parse(text).label
    except (KeyError, ValueError):
        raise SettingsError(field_name, f"unknown tier {text.strip()!r}",
                            "use urgent, high, normal or low") from None


def _validated(values: dict[str, Any], overrides: dict[str, tuple[str, Any]]) -> SchedulingPolicy:
    """The block model checks the merged values; a refused override names its variable."""
    try:
        return SchedulingPolicy.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else ""
        env = overrides.get(key, (key or "policy",))[0]
        raise SettingsError(env, f"{error['msg'].lower()} (policy key {key}, value {error.get('input')!r})",
                            f"set {env} to a valid {key}, or unset it to use the saved block") from None

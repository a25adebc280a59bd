"""Submit-time policy checks: tier caps per team, from the resolved scheduling policy.

`YOLOQ_TIER_CAPS="research=high,interns=normal"` (or the `yoloq-policy` block) limits
the most urgent tier a team may use.
"""

from __future__ import annotations

import os

from yoloq.errors import UserError
from yoloq.tiers import Tier


def tier_caps() -> dict[str, Tier]:
    """Parse `YOLOQ_TIER_CAPS` (used by `blocks.policy` when no block is saved)."""
    caps = {}
    for item in filter(None, (p.strip() for p in os.environ.get("YOLOQ_TIER_CAPS", "").split(","))):
        team, _, tier = item.partition("=")
        caps[team.strip()] = Tier.parse(tier)
    return caps


def check_submit_allowed(spec) -> None:
    from blocks.policy import load_policy
    from work_pools.policy.rules import check_tier_allowed

    policy = load_policy()
    refusal = check_tier_allowed(spec.team, spec.tier, policy)
    if refusal:
        cap = policy.tier_caps.get(spec.team, policy.default_tier_cap)
        raise UserError("priority", refusal, f"use priority: {cap.label}")

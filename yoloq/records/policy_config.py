"""Submit-time policy checks: tier caps per team, from the resolved scheduling policy.

`YOLOQ_TIER_CAPS="research=high,interns=normal"` (or the `yoloq-policy` block) limits
the most urgent tier a team may use; `blocks.policy.tier_caps` parses it. Imports point
one way: this module reads `blocks.policy`, never the reverse.
"""

from __future__ import annotations

from yoloq.base.errors import UserError


def check_submit_allowed(spec) -> None:
    from blocks.policy import load_policy
    from work_pools.policy.rules import check_tier_allowed

    policy = load_policy()
    refusal = check_tier_allowed(spec.team, spec.tier, policy)
    if refusal:
        cap = policy.tier_caps.get(spec.team, policy.default_tier_cap)
        raise UserError("priority", refusal, f"use priority: {cap.label}")

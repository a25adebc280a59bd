"""Submit-time policy checks (tier caps per team), from the environment or a config file.

`YOLOQ_TIER_CAPS="research=high,interns=normal"` limits the most urgent tier a team may use.
"""

from __future__ import annotations

import os

from yoloq.errors import UserError
from yoloq.tiers import Tier


def tier_caps() -> dict[str, Tier]:
    caps = {}
    for item in filter(None, (p.strip() for p in os.environ.get("YOLOQ_TIER_CAPS", "").split(","))):
        team, _, tier = item.partition("=")
        caps[team.strip()] = Tier.parse(tier)
    return caps


def check_submit_allowed(spec) -> None:
    cap = tier_caps().get(spec.team)
    if cap is not None and spec.tier.outranks(cap):
        raise UserError("priority", f"team {spec.team!r} may submit at most {cap.label!r}, "
                                    f"not {spec.priority!r}", f"use priority: {cap.label}")

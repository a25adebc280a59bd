"""`PUT /v1/policy`: set keys of the saved scheduling policy (admin tokens only).

The same check and save as `yoloq policy set` on the server host (`yoloq.records.policy_edit`):
an unknown key or a bad value is refused whole (422, one error naming the key), nothing saved.
The answer is the policy in force afterwards, as `GET /v1/policy` gives it, so a caller sees at
once when an environment variable of the stack still overrides a key it set.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from yoloq.api.auth import Admin

router = APIRouter(tags=["policy (admin)"])


class PolicyChange(BaseModel):
    set: dict[str, Any] = Field(description="policy keys and their new values",
                                examples=[{"min_runtime_s": 0, "aging_step_s": 1800}])


@router.put("/policy", summary="Set policy keys (saved in the yoloq-policy block); the policy in force")
def set_policy(change: PolicyChange, who: Admin) -> dict[str, Any]:
    from blocks.policy import resolve_policy_settings
    from yoloq.api.cluster import policy_document
    from yoloq.service.connection import stack_client
    from yoloq.records.events import acting_as
    from yoloq.records.policy_edit import parse_assignments, set_policy_keys

    values = parse_assignments([f"{key}={_text(value)}" for key, value in change.set.items()])
    with stack_client(), acting_as(who.actor):
        set_policy_keys(values)
        resolved = resolve_policy_settings()
    return policy_document(resolved)


def _text(value: Any) -> str:
    """A JSON value as the CLI would write it (`true` -> "true", 0 -> "0")."""
    return str(value).lower() if isinstance(value, bool) else str(value)

"""Usage and time windows: Training Units per team and job from the segment runs' own records
(`work_pools.usage`), and the `--since` spans the commands and the API accept."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from yoloq.base.errors import UserError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """A usage window (`90m`, `24h`, `7d`) in seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not match:
        raise UserError("--since", f"cannot read {text!r}", "write a number and a unit, e.g. 24h or 7d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_audit_since(text: str) -> datetime:
    """An audit window's start: an ISO time, or a span back from now (`30m`, `12h`, `7d`)."""
    match = re.fullmatch(r"(\d+)([mhd])", text.strip())
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return datetime.now(timezone.utc) - timedelta(**{unit: int(match.group(1))})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UserError("--since", f"cannot read {text!r}", "use an ISO time or 30m, 12h, 7d") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def usage_rows(window_s: float, team: str | None = None) -> list[dict[str, Any]]:
    """Rows (team, job, segments, gpu_s, tu) over the last `window_s` seconds; the caller has
    pointed Prefect at the stack. Shared by `yoloq usage` and `GET /v1/usage`."""
    from work_pools.usage import usage_table
    from yoloq.base.names import GPU_POOL

    now = time.time()
    rows = usage_table(_intervals(GPU_POOL, now), now, now - window_s, team)
    for row in rows:
        row["gpu_s"], row["tu"] = round(row["gpu_s"], 1), round(row["tu"], 6)
    return rows


def _intervals(pool: str, now: float) -> list[Any]:
    """Every segment interval of the pool (the scheduler's own reader)."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.usage import UsageBook

    async def read() -> list[Any]:
        async with get_client() as async_client:
            return await UsageBook(pool).refresh(async_client, now)

    return run_coro_as_sync(read()) or []

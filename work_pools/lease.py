"""The scheduler lease: at most one process decides for a pool at a time.

The lease is a Prefect global concurrency limit of one slot,
`yoloq-scheduler-<pool>`, taken with a lease (`increment-with-lease`). The holder
renews it before every decision pass; a renewal that fails means the lease was
revoked (it expired while this process was stopped or cut off), and the process
stops deciding at once. A holder that dies stops renewing: Prefect's repossessor
service revokes the expired lease (it looks every
`PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS`, 15 s by default; the yoloq
stack sets 2 s), and the next standby to ask takes it over. Prefect requires a
lease of at least 60 s, so a takeover after a SIGKILL takes lease + repossessor
loop + one poll. Who holds it is written to the Variable `yoloq-scheduler` for
`yoloq status` and the tests.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from work_pools.prefect_vars import upsert_variable

_LOG = logging.getLogger("yoloq.scheduler")
DEFAULT_LEASE_S = 60.0  # the smallest lease Prefect 3.9 accepts
LEADER_VARIABLE = "yoloq-scheduler"


def limit_name(pool: str) -> str:
    return f"yoloq-scheduler-{pool}"


def lease_seconds() -> float:
    value = os.environ.get("YOLOQ_SCHEDULER_LEASE_S")
    return max(DEFAULT_LEASE_S, float(value)) if value else DEFAULT_LEASE_S


@dataclass
class SchedulerLease:
    """Held by one node agent at a time; `hold()` is called before every decision pass."""

    pool: str
    holder: str
    duration_s: float = DEFAULT_LEASE_S
    lease_id: UUID | None = None
    held_since: float | None = None
    _limit_ready: bool = False

    async def hold(self, client: Any) -> bool:
        """True when this process holds the lease now (renewed, or newly taken)."""
        if self.lease_id is not None:
            if await self._renew(client):
                return True
            self.lease_id, self.held_since = None, None  # lost: stop deciding at once
        return await self._acquire(client)

    async def release(self, client: Any) -> None:
        if self.lease_id is None:
            return
        try:
            await client.release_concurrency_slots_with_lease(self.lease_id)
        except Exception:
            pass  # an unreleased lease simply expires
        self.lease_id, self.held_since = None, None

    async def _renew(self, client: Any) -> bool:
        import httpx

        try:
            await client.renew_concurrency_lease(self.lease_id, self.duration_s)
            return True
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in (404, 410):
                return False
            raise

    async def _acquire(self, client: Any) -> bool:
        import httpx

        await self._ensure_limit(client)
        try:
            response = await client.increment_concurrency_slots_with_lease(
                names=[limit_name(self.pool)], slots=1, mode="concurrency",
                lease_duration=self.duration_s)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 423:  # held by another scheduler
                return False
            raise
        self.lease_id = UUID(str(response.json()["lease_id"]))
        self.held_since = time.time()
        await _announce(client, self)
        return True

    async def _ensure_limit(self, client: Any) -> None:
        if self._limit_ready:
            return
        from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
        from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

        try:
            await client.read_global_concurrency_limit_by_name(limit_name(self.pool))
        except ObjectNotFound:
            try:
                await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=limit_name(self.pool), limit=1))
            except ObjectAlreadyExists:
                pass
        self._limit_ready = True


async def _announce(client: Any, lease: SchedulerLease) -> None:
    """Record the new leader (informative; the lease itself is the authority)."""
    value = {"pool": lease.pool, "holder": lease.holder, "host": socket.gethostname(),
             "pid": os.getpid(), "since": lease.held_since}
    try:
        await upsert_variable(client, LEADER_VARIABLE, value)
    except Exception as exc:  # informative: the lease is the authority
        _LOG.warning("could not record the scheduler leader: %s", exc)


async def current_leader(client: Any) -> dict[str, Any] | None:
    variable = await client.read_variable_by_name(LEADER_VARIABLE)
    return variable.value if variable is not None and isinstance(variable.value, dict) else None


STATS_VARIABLE = "yoloq-scheduler-stats"


async def publish_stats(client: Any, stats: dict[str, Any]) -> None:
    """The leader's recent pass and decide timings (`yoloq-scheduler-stats`; bench/cluster.py)."""
    try:
        await upsert_variable(client, STATS_VARIABLE, stats)
    except Exception as exc:  # informative only
        _LOG.warning("could not publish scheduler stats: %s", exc)

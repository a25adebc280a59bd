"""The scheduler lease: at most one process decides for a pool at a time.

The lease is a Prefect global concurrency limit of one slot,
`yoloq-scheduler-<pool>`, taken with a lease (`increment-with-lease`). The holder
renews it before every decision pass, and every third of the lease in a task of its own
(`keep_renewed`), so a pass that runs longer than the lease (a loaded server) does not lose
it; a renewal that fails means the lease was revoked (it expired while this process was
stopped or cut off), and the process stops deciding at once. A holder that dies stops renewing: Prefect's repossessor
service revokes the expired lease (it looks every
`PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS`, 15 s by default; the yoloq
stack sets 2 s), and the next standby to ask takes it over. Prefect requires a
lease of at least 60 s, so a takeover after a SIGKILL takes lease + repossessor
loop + one poll. Who holds it is written to the Variable `yoloq-scheduler` for
`yoloq status` and the tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from work_pools.prefect_vars import upsert_variable
from yoloq.settings import settings

_LOG = logging.getLogger("yoloq.scheduler")
DEFAULT_LEASE_S = 60.0  # the smallest lease Prefect 3.9 accepts
LEADER_VARIABLE = "yoloq-scheduler"
MAX_BACKOFF_S = 8.0  # after transient failures: well inside the lease, so a holder renews in time
LEASE_CLIENT_RETRIES = 1  # Prefect's client would retry a 503 five times (2+4+...+32 s): the
# whole node pass (heartbeat, starting assigned runs) would wait a minute on the lease


def limit_name(pool: str) -> str:
    return f"yoloq-scheduler-{pool}"


def lease_seconds() -> float:
    value = settings().scheduler_lease_s
    return max(DEFAULT_LEASE_S, value) if value else DEFAULT_LEASE_S


@dataclass
class SchedulerLease:
    """Held by one node agent at a time; `hold()` is called before every decision pass."""

    pool: str
    holder: str
    duration_s: float = DEFAULT_LEASE_S
    lease_id: UUID | None = None
    held_since: float | None = None
    _limit_ready: bool = False
    _failures: int = 0
    _retry_at: float = 0.0  # monotonic: no lease call before this after a transient failure
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)  # pass vs keeper

    @property
    def renew_every_s(self) -> float:
        return self.duration_s / 3

    async def hold(self, client: Any, acquire: bool = True) -> bool:
        """True when this process holds the lease now (renewed, or newly taken).

        A transient answer from the server (5xx after Prefect's own retries, a dropped
        connection) is not a lost lease and not an error for the caller: this pass does not
        decide, one warning is logged, and the lease is asked again after a bounded backoff
        (1, 2, 4 ... `MAX_BACKOFF_S` s). A holder keeps its lease id and renews it next time;
        only 404/410 from a renewal (revoked) drop it. The node's own work (heartbeat,
        starting what was assigned to it) goes on meanwhile. With `acquire=False` a lease
        not held now is not asked for (the keeper only renews)."""
        async with self._lock:
            return await self._hold_once(client, acquire)

    async def _hold_once(self, client: Any, acquire: bool) -> bool:
        now = time.monotonic()
        if now < self._retry_at:
            return False
        if not acquire and self.lease_id is None:
            return False
        try:
            with _few_client_retries():
                held = await self._hold(client, acquire)
        except Exception as exc:
            if not _transient(exc):
                raise
            self._failures += 1
            wait = min(MAX_BACKOFF_S, 2.0 ** (self._failures - 1))
            self._retry_at = time.monotonic() + wait
            _LOG.warning("scheduler lease %s on %s failed transiently (%s); not deciding this "
                         "pass, asking again in %.0f s", "renewal" if self.lease_id else "request",
                         limit_name(self.pool), _short(exc), wait)
            return False
        self._failures, self._retry_at = 0, 0.0
        return held

    async def _hold(self, client: Any, acquire: bool) -> bool:
        if self.lease_id is not None:
            if await self._renew(client):
                return True
            self.lease_id, self.held_since = None, None  # lost: stop deciding at once
            _LOG.warning("scheduler lease on %s was revoked; no longer deciding", limit_name(self.pool))
        return await self._acquire(client) if acquire else False

    async def release(self, client: Any) -> None:
        async with self._lock:
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


async def keep_renewed(lease: SchedulerLease, client: Any, stopped: Any) -> None:
    """Renew a held lease every third of its duration until the `stopped` event is set,
    whatever the decision passes are doing: a pass renews only at its start, and one pass on
    a loaded server took 80 s, past the 60 s lease, so a standby took over mid-pass."""
    import anyio

    while not stopped.is_set():
        with anyio.move_on_after(lease.renew_every_s):
            await stopped.wait()
        if stopped.is_set():
            return
        try:
            await lease.hold(client, acquire=False)
        except Exception as exc:  # not transient: the next pass meets it too, and logs it
            _LOG.warning("scheduler lease renewal failed (%s); the next pass asks again", _short(exc))


def _transient(exc: Exception) -> bool:
    """A server or connection failure worth asking again (5xx, 429, timeouts, resets)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        return code >= 500 or code == 429
    return isinstance(exc, (httpx.TransportError, OSError))


def _short(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url.path}"
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


_FEW_RETRIES: dict[int, tuple[Any, Any]] = {}


def _few_client_retries() -> Any:
    """Prefect's client retries, cut to `LEASE_CLIENT_RETRIES` for the lease calls only
    (settings are per context). The derived settings are built once per settings object:
    building them costs about 0.2 s of CPU, too much for every pass of every node."""
    import prefect.context
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    context = prefect.context.get_settings_context()
    cached = _FEW_RETRIES.get(id(context.settings))
    if cached is None or cached[0] is not context.settings:
        cached = (context.settings, context.settings.copy_with_update(
            updates={PREFECT_CLIENT_MAX_RETRIES: LEASE_CLIENT_RETRIES}))
        _FEW_RETRIES.clear()
        _FEW_RETRIES[id(context.settings)] = cached
    return prefect.context.SettingsContext(profile=context.profile, settings=cached[1])


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

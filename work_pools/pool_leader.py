"""The pool leader: whichever node agent holds the pool's scheduler lease decides for every
node of the pool, and publishes the one queue board.

Each pass it renews (or takes) the lease (`work_pools.lease`), reads every node's record,
asks `work_pools.pool_scheduler` for a pass (assignments written as labels on the runs,
preemption requests on victims) and reports: quota notices, the board and the timings, in
a task of its own. A leader that stops cleanly releases its lease, so the next `yoloq up`
(or a standby) decides at once instead of after the lease expires.
"""

from __future__ import annotations

from typing import Any

import anyio

from work_pools import nodes
from work_pools.lease import SchedulerLease, keep_renewed, lease_seconds, publish_stats
from work_pools.pool_scheduler import PassResult, PoolScheduler
from work_pools.scheduling import WorkerPolicy
from work_pools.segments import SegmentView

STATS_EVERY_S = 10.0  # the leader publishes pass/decide timings this often


class PoolLeader:
    """The lease and the decisions of one pool, on behalf of one node agent."""

    def __init__(self, pool: str, node_name: str, logger: Any, policy: WorkerPolicy) -> None:
        self.pool, self.node_name, self.logger, self.policy = pool, node_name, logger, policy
        self.lease = SchedulerLease(pool=pool, holder=node_name, duration_s=lease_seconds())
        self.scheduler = PoolScheduler(pool)
        self.last_pass: PassResult | None = None
        self._keeper_stop: anyio.Event | None = None
        self._reporting = False
        self._stats_at = 0.0

    @property
    def is_leader(self) -> bool:
        return self.lease.lease_id is not None

    def keep_lease(self, task_group: Any, client: Any) -> None:
        """Renew a held lease in a task of its own (a long pass must not lose it)."""
        self._keeper_stop = anyio.Event()
        task_group.start_soon(keep_renewed, self.lease, client, self._keeper_stop)

    async def hold(self, client: Any) -> bool:
        return await self.lease.hold(client)

    async def lead(self, client: Any, own: nodes.NodeRecord, now: float) -> PassResult:
        """Decide for the whole pool (only the lease holder gets here)."""
        records = [r for r in await nodes.read_nodes(client, self.pool) if r.name != self.node_name]
        records.append(own)  # this node's own, as of now (no write needed)
        result = await self.scheduler.run_pass(client, records, self.policy, now)
        self.last_pass = result
        for run_id, (node, gpus) in result.assigned.items():
            self.logger.info("scheduler: %s -> node %s GPU %s", run_id, node, gpus)
        for run_id in result.drained:
            self.logger.warning("scheduler: drained %s from a lost node", run_id)
        return result

    async def resign(self, client: Any) -> None:
        """Stop renewing and release the lease now (a clean stop): no one waits for it to expire."""
        if self._keeper_stop is not None:
            self._keeper_stop.set()
        held = self.is_leader
        await self.lease.release(client)
        if held:
            self.logger.info("scheduler lease on pool %s released", self.pool)

    def report_soon(self, task_group: Any, client: Any, result: PassResult, now: float,
                    wake: dict[str, Any]) -> None:
        """Quota notices, the queue board and the stats, in a task of their own: each is a
        write that waits for SQLite's lock under load (7 s seen between an assignment and its
        start when the board came first). One report at a time; a pass during one skips its
        own (the next pass reports the newer decision)."""
        if self._reporting:
            return
        self._reporting = True
        task_group.start_soon(self._report, client, result, now, wake)

    async def _report(self, client: Any, result: PassResult, now: float, wake: dict[str, Any]) -> None:
        try:
            if result.decision is not None:
                await self._notify_quota_breaches(result.decision, now)
                await self._publish_board(client, result, now)
            if now - self._stats_at >= STATS_EVERY_S:
                self._stats_at = now
                await publish_stats(client, {**self.scheduler.stats(), "holder": self.node_name,
                                             "at": now, "wake": wake})
        except Exception as exc:  # informative: never stop the agent for it
            self.logger.warning("pass report not published (%s)", " ".join(str(exc).split())[:200])
        finally:
            self._reporting = False

    async def _notify_quota_breaches(self, decision: Any, now: float) -> None:
        from yoloq.records.quota_alerts import NotifiedBreaches, notify_quota_breaches

        if decision.raw.quota_breaches:
            await anyio.to_thread.run_sync(notify_quota_breaches, decision.raw.quota_breaches,
                                           NotifiedBreaches(), now)

    async def _publish_board(self, client: Any, result: PassResult, now: float) -> None:
        try:
            from work_pools.board import publish_if_changed

            await publish_if_changed(client, _BoardSource(self.pool, self.policy, result),
                                     result.decision, now)
        except Exception as exc:  # the board is informative; never stop scheduling for it
            self.logger.debug("queue board not published: %s", exc)


class _BoardSource:
    """What the queue board reads: the pool's name, the policy, all running segments."""

    def __init__(self, pool: str, policy: WorkerPolicy, result: PassResult) -> None:
        self.name = pool
        self._policy = policy
        self._result = result

    def _running_views(self) -> list[SegmentView]:
        return list(self._result.running)


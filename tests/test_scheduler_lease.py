"""The scheduler lease on a real Prefect server: one holder at a time, a lost lease stops
the holder at once, a released or revoked lease passes to a standby."""

from __future__ import annotations

import asyncio

import pytest

from work_pools.lease import SchedulerLease, current_leader, keep_renewed, limit_name

pytestmark = pytest.mark.service


def _run(coro):
    return asyncio.run(coro)


async def _with_client(fn):
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return await fn(client)


def test_one_holder_at_a_time_and_release_hands_over(yoloq_stack):
    first, second = SchedulerLease("lease-a", "node-1"), SchedulerLease("lease-a", "node-2")

    async def scenario(client):
        took = [await first.hold(client), await second.hold(client)]
        renewed = await first.hold(client)
        leader_then = await current_leader(client)
        await first.release(client)
        taken_over = await second.hold(client)
        blocked = await first.hold(client)
        limit = await client.read_global_concurrency_limit_by_name(limit_name("lease-a"))
        await second.release(client)
        return took, renewed, leader_then, taken_over, blocked, limit

    took, renewed, leader_then, taken_over, blocked, limit = _run(_with_client(scenario))
    assert took == [True, False], "the second scheduler must wait while the first holds the lease"
    assert renewed is True and leader_then["holder"] == "node-1"
    assert taken_over is True and blocked is False
    assert limit.limit == 1


def test_a_revoked_lease_stops_its_holder_at_once(yoloq_stack):
    """What the repossessor does to an expired lease, done now: the old holder's next
    `hold()` fails its renewal and it does not decide, while the standby takes over."""
    old, standby = SchedulerLease("lease-b", "node-1"), SchedulerLease("lease-b", "node-2")

    async def scenario(client):
        assert await old.hold(client)
        await client.release_concurrency_slots_with_lease(old.lease_id)  # revoked
        took_over = await standby.hold(client)
        old_still_leads = await old.hold(client)
        await standby.release(client)
        return took_over, old_still_leads, old.lease_id

    took_over, old_still_leads, old_lease = _run(_with_client(scenario))
    assert took_over is True
    assert old_still_leads is False and old_lease is None


def test_the_keeper_holds_the_lease_through_a_pass_longer_than_the_lease(yoloq_stack):
    """Two holders make no `hold()` call for longer than the lease (one long decision pass);
    only one runs the agent's keeper. Its standby never gets the lease; the other standby takes
    its lease over once it expires (the failure the keeper prevents, seen in the same run)."""
    import time

    import anyio

    kept, kept_standby = SchedulerLease("lease-k", "node-1"), SchedulerLease("lease-k", "node-2")
    bare, bare_standby = SchedulerLease("lease-u", "node-1"), SchedulerLease("lease-u", "node-2")
    assert kept.renew_every_s == kept.duration_s / 3

    async def scenario(client):
        assert await kept.hold(client) and await bare.hold(client)
        standby_got = {"kept": False, "bare": False}
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(keep_renewed, kept, client, stop)
            deadline = time.monotonic() + kept.duration_s + 20
            while time.monotonic() < deadline:  # the long pass: neither holder calls hold()
                await anyio.sleep(5)
                standby_got["kept"] |= await kept_standby.hold(client)
                standby_got["bare"] = standby_got["bare"] or await bare_standby.hold(client)
            stop.set()
        held_after = {"kept": await kept.hold(client), "bare": await bare.hold(client)}
        for lease in (kept, bare, kept_standby, bare_standby):
            await lease.release(client)
        return standby_got, held_after

    standby_got, held_after = _run(_with_client(scenario))
    assert standby_got == {"kept": False, "bare": True}, standby_got
    assert held_after == {"kept": True, "bare": False}, held_after


def test_the_lease_survives_a_server_restart(tmp_path):
    """The profiles keep leases on disk: after the server is killed and started again, the
    holder renews its lease and a standby is still refused (the in-memory store lost the lease
    and kept the slot taken, so nobody could ever lead again)."""
    import os
    import signal
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from yoloq.base.paths import state_paths
    from yoloq.ops.stack import Stack, api_answers, free_port, stack_env
    from stack_helpers import wait_for

    stack = Stack(state_paths(tmp_path / "home"), free_port())
    stack.paths.ensure()
    saved = dict(os.environ)
    try:
        env = stack_env(stack)  # (it also applies the offline settings to this process)
    finally:
        os.environ.clear()
        os.environ.update(saved)

    def start() -> subprocess.Popen:
        server = subprocess.Popen([sys.executable, "-m", "yoloq.ops.server", "--port", str(stack.port)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        wait_for(lambda: api_answers(stack.api_url), "the server", timeout_s=300)
        return server

    holder, standby = SchedulerLease("lease-r", "node-1"), SchedulerLease("lease-r", "node-2")
    server = start()
    try:
        with temporary_settings(updates={PREFECT_API_URL: stack.api_url}):
            assert _run(_with_client(holder.hold)) is True
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            server = start()
            assert _run(_with_client(holder.hold)) is True, "the holder renews after the restart"
            assert _run(_with_client(standby.hold)) is False
    finally:
        os.killpg(server.pid, signal.SIGKILL)


class _FlakyClient:
    """A Prefect client whose lease calls answer 503 `fail` times, then work."""

    def __init__(self, fail: int) -> None:
        self.fail, self.calls = fail, []

    def _maybe_fail(self, path: str) -> None:
        import httpx

        if self.fail > 0:
            self.fail -= 1
            request = httpx.Request("POST", f"http://server/api{path}")
            raise httpx.HTTPStatusError("503", request=request,
                                        response=httpx.Response(503, request=request))

    async def read_global_concurrency_limit_by_name(self, name):
        return object()

    async def increment_concurrency_slots_with_lease(self, **kwargs):
        self.calls.append("increment")
        self._maybe_fail("/v2/concurrency_limits/increment-with-lease")

        class Answer:
            def json(self):
                return {"lease_id": "00000000-0000-0000-0000-000000000001"}

        return Answer()

    async def renew_concurrency_lease(self, lease_id, duration):
        self.calls.append("renew")
        self._maybe_fail(f"/v2/concurrency_limits/leases/{lease_id}/renew")

    async def read_variable_by_name(self, name):
        return None

    async def create_variable(self, variable):
        return variable

    async def update_variable(self, variable):
        return variable


def test_a_transient_503_skips_one_pass_and_backs_off(monkeypatch, caplog):
    """A 503 on the lease (after the client's own retries) is not an error for the node pass and
    not a lost lease: not deciding this pass, one warning, asked again after a bounded backoff."""
    import work_pools.lease as lease_module

    monkeypatch.setattr(lease_module, "_announce", lambda client, lease: asyncio.sleep(0))
    lease, client = SchedulerLease("lease-flaky", "node-1"), _FlakyClient(fail=1)
    with caplog.at_level("WARNING", logger="yoloq.scheduler"):
        assert _run(lease.hold(client)) is False
    assert "failed transiently" in caplog.text and "HTTP 503" in caplog.text
    assert _run(lease.hold(client)) is False and client.calls == ["increment"]  # backing off
    lease._retry_at = 0.0
    assert _run(lease.hold(client)) is True and lease.lease_id is not None
    client.fail = 1  # a renewal answered 503: keep the lease, skip this pass, renew next time
    assert _run(lease.hold(client)) is False and lease.lease_id is not None
    lease._retry_at = 0.0
    assert _run(lease.hold(client)) is True
    assert client.calls == ["increment", "increment", "renew", "renew"]
    assert lease._failures == 0


def test_the_lease_calls_use_few_client_retries():
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    from work_pools.lease import LEASE_CLIENT_RETRIES, _few_client_retries

    before = PREFECT_CLIENT_MAX_RETRIES.value()
    with _few_client_retries():
        assert PREFECT_CLIENT_MAX_RETRIES.value() == LEASE_CLIENT_RETRIES
    assert PREFECT_CLIENT_MAX_RETRIES.value() == before

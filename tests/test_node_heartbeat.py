"""The node record on a real server: a scheduling pass never waits for the heartbeat write
(on SQLite that upsert can wait seconds for the write lock), a new segment process is
announced at once, and a pool's scheduler reads only its own pool's nodes."""

from __future__ import annotations

import uuid

import anyio
import pytest

pytestmark = [pytest.mark.service]


def _run(coro_fn):
    from prefect.utilities.asyncutils import run_coro_as_sync

    return run_coro_as_sync(coro_fn())


async def _wait(predicate, what: str, timeout_s: float = 120) -> None:
    with anyio.move_on_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def _delete_pool(name: str) -> None:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.delete_work_pool(name)


def test_a_pass_completes_while_the_heartbeat_write_is_stuck(yoloq_stack, monkeypatch):
    from work_pools import nodes
    from work_pools.worker import YoloGpuWorker

    pool, node = f"probe-{uuid.uuid4().hex[:6]}", f"hb-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("YOLOQ_DECLARED_GPUS", "1")
    monkeypatch.delenv("YOLOQ_NODE_NAME", raising=False)
    published, stuck = [], anyio.Event()
    real_publish = nodes.publish

    async def publish_stuck_after_the_first(client, record):
        published.append(record)
        if len(published) > 1:
            await stuck.wait()  # the server's write lock, held for as long as the test likes
        await real_publish(client, record)

    monkeypatch.setattr(nodes, "publish", publish_stuck_after_the_first)

    async def scenario() -> dict:
        async with YoloGpuWorker(work_pool_name=pool, name=node) as worker:
            assert len(published) == 1 and worker.agent.heartbeats == 1, "setup publishes the record"
            worker.agent.live_runs_changed()  # as a segment process starting does
            await _wait(lambda: len(published) == 2, "the second beat")
            with anyio.move_on_after(300) as pass_scope:  # a pass writing the beat never ends
                await worker._poll_once([])
            seen = {"pass_ended": not pass_scope.cancelled_caught,
                    "beats_done_during_pass": worker.agent.heartbeats, "leader": worker.is_leader}
            stuck.set()
            await _wait(lambda: worker.agent.heartbeats == 2, "the released beat")
            return seen

    try:
        seen = _run(scenario)
    finally:
        _run(lambda: _delete_pool(pool))
    assert seen["pass_ended"], "the pass waited on the stuck heartbeat write"
    assert seen["beats_done_during_pass"] == 1, "the pass ran while the heartbeat write was stuck"
    assert seen["leader"], "the pass did the leader's work (its own pool's lease)"
    assert published[1].pool == pool and published[1].name == node


def test_a_pool_reads_its_own_nodes_and_records_that_name_no_pool(yoloq_stack):
    from prefect.client.orchestration import get_client

    from work_pools import nodes
    from work_pools.inventory import GpuInfo

    gpu = GpuInfo(index=0, uuid="", name="declared", mem_total_gb=16.0, mem_free_gb=16.0, kind="declared")
    tag = uuid.uuid4().hex[:6]
    mine, other, legacy = f"mine-{tag}", f"other-{tag}", f"legacy-{tag}"

    async def scenario() -> tuple[set, set, nodes.NodeRecord]:
        async with get_client() as client:
            await nodes.publish(client, nodes.make_record(mine, [gpu], [], pool=f"pool-a-{tag}"))
            # stale heartbeats: the stack's own scheduler must not place work on them
            await nodes.publish(client, nodes.make_record(other, [gpu], [], now=1000.0,
                                                          pool=f"pool-b-{tag}"))
            await nodes.publish(client, nodes.make_record(legacy, [gpu], [], now=1000.0))
            updated = nodes.make_record(mine, [gpu], ["run-1"], now=123.0, pool=f"pool-a-{tag}")
            await nodes.publish(client, updated)  # the second publish updates in place
            try:
                seen_a = {r.name for r in await nodes.read_nodes(client, f"pool-a-{tag}")}
                seen_all = {r.name for r in await nodes.read_nodes(client)}
                record = next(r for r in await nodes.read_nodes(client) if r.name == mine)
                return seen_a, seen_all, record
            finally:
                for name in (mine, other, legacy):
                    await nodes.remove(client, name)

    seen_a, seen_all, record = _run(scenario)
    assert {mine, legacy} <= seen_a and other not in seen_a
    assert {mine, other, legacy} <= seen_all
    assert (record.heartbeat_at, record.live_runs) == (123.0, ("run-1",))


def test_a_stopping_agent_crashes_its_running_segments_but_keeps_ended_ones(yoloq_stack,
                                                                            monkeypatch):
    """An agent shutting down kills every segment process it has. A run already Completed
    whose process was only exiting keeps its state; a Running one becomes Crashed."""
    import subprocess

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Completed, Running

    from work_pools.worker import YoloGpuWorker

    @flow(name="agent-stop-probe")
    def probe() -> None:
        pass

    pool, node = f"probe-{uuid.uuid4().hex[:6]}", f"stop-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("YOLOQ_DECLARED_GPUS", "2")
    monkeypatch.delenv("YOLOQ_NODE_NAME", raising=False)
    with get_client(sync_client=True) as client:
        ended, running = (client.create_flow_run(probe, state=state) for state in (Completed(), Running()))
    sleepers = [subprocess.Popen(["sleep", "900"], start_new_session=True) for _ in range(2)]

    async def scenario() -> None:
        async with YoloGpuWorker(work_pool_name=pool, name=node) as worker:
            worker.agent.pids.update({ended.id: sleepers[0].pid, running.id: sleepers[1].pid})
            await worker.agent.stop_all(worker.client, "test stop")

    try:
        _run(scenario)
        # ended long before their 900 s: killed by the agent (a TimeoutExpired if not); the
        # agent reaps them itself, so Popen sees no signal in the exit code
        exits = [s.wait(30) for s in sleepers]
    finally:
        _run(lambda: _delete_pool(pool))
        for sleeper in sleepers:
            sleeper.kill()
    assert all(code is not None for code in exits), exits
    with get_client(sync_client=True) as client:
        states = [client.read_flow_run(r.id).state for r in (ended, running)]
    assert states[0].is_completed(), states[0]
    assert states[1].is_crashed() and "test stop" in states[1].message, states[1]

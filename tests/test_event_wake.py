"""Queue-to-running without waiting out a poll: Prefect's event stream wakes the job runner's
poll for new jobs, its segment watch and the GPU worker's scheduling pass (real server, real
websocket).

The assertions are on counters of event-driven wakes, with the poll made too slow (or
absent) to have done the work; the measured delays are recorded, never asserted.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.stack_helpers import wait_for

pytestmark = [pytest.mark.service]


def _final_run(client):
    """A flow run of no pool, moved to Completed by hand (as a segment's end would)."""
    from prefect import flow

    @flow(name="event-wake-probe")
    def probe() -> None:
        pass

    from prefect.states import Pending

    return client.create_flow_run(probe, state=Pending())


def test_segment_watch_reads_a_final_run_on_its_event(yoloq_stack, record_property):
    from prefect.client.orchestration import get_client
    from prefect.states import Completed

    from work_pools.segment_watch import SegmentWatch

    watch = SegmentWatch(period_s=3600.0, events=True)  # the poll cannot be what wakes it
    watch.start()
    try:
        assert watch._listener.connected.wait(60), "no event subscription"
        with get_client(sync_client=True) as client:
            run = _final_run(client)
            got: dict = {}
            waiter = threading.Thread(target=lambda: got.update(run=watch.wait_final(run.id)))
            waiter.start()
            wait_for(lambda: watch.watched() == 1, "the waiter to register", 30, 0.05)
            ended = time.time()
            client.set_flow_run_state(run.id, Completed(), force=True)
            waiter.join(300)  # a loaded embedded server delivers its events late
        assert not waiter.is_alive(), "the final state's event never woke the waiter"
        assert got["run"].state.is_completed()
        assert (watch.event_wakes, watch.poll_wakes) == (1, 0)
        record_property("event_wake_s", round(time.time() - ended, 3))
    finally:
        watch.stop()


def test_worker_runs_a_pass_on_a_slot_freed_event(yoloq_stack, record_property):
    """A node's slot-freed event (as another node emits it) starts the leader's pass."""
    import asyncio

    from prefect.client.orchestration import get_client

    from work_pools import events_wake
    from work_pools.lease import STATS_VARIABLE
    from yoloq.base.names import GPU_POOL

    def wake_stats() -> dict:
        with get_client(sync_client=True) as client:
            variable = client.read_variable_by_name(STATS_VARIABLE)
        return ((variable.value if variable else None) or {}).get("wake") or {}

    before = wait_for(wake_stats, "the leader's first published stats", 120, 1.0)
    with get_client(sync_client=True) as client:
        pool_id = client.read_work_pool(GPU_POOL).id
    def emitted_then_woken() -> dict | bool:
        """Emit again at each poll: under load (the SQLite server answering `database is
        locked`) one event can land before the worker's subscription or be dropped."""
        events_wake.emit_slot_freed("probe-node", GPU_POOL, pool_id, "00000000-0000-0000-0000-000000000000")
        asyncio.run(asyncio.sleep(0.5))
        stats = wake_stats()
        return stats.get("event_passes", 0) > before["event_passes"] and stats

    after = wait_for(emitted_then_woken, "a pass started by the event", 180, 2.0)
    assert after["event_passes"] > before["event_passes"]
    record_property("wake_stats", after)


def test_job_runner_polls_its_pool_on_a_new_jobs_scheduled_event(yoloq_stack):
    """A `yolo-job` run turning Scheduled starts the runner's poll at once. The probe runner
    never runs its poll loop (it is entered, not started), so only the event can start a pass;
    the run is scheduled a day ahead, so the stack's own runner leaves it alone."""
    import asyncio
    from datetime import datetime, timedelta, timezone

    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from work_pools.job_runner import InProcessJobWorker
    from yoloq.base.names import JOB_DEPLOYMENT, JOBS_POOL

    class Probe(InProcessJobWorker):
        passes = 0

        async def get_and_submit_flow_runs(self) -> list:
            type(self).passes += 1
            return []

    async def scenario() -> None:
        async with Probe(work_pool_name=JOBS_POOL, name="wake-probe") as probe:
            for _ in range(600):
                if probe._waker.connected.is_set():
                    break
                await asyncio.sleep(0.1)
            assert probe._waker.connected.is_set(), "no event subscription"
            async with get_client() as client:
                deployment = await client.read_deployment_by_name(JOB_DEPLOYMENT)
                later = datetime.now(timezone.utc) + timedelta(days=1)
                run = await client.create_flow_run_from_deployment(
                    deployment.id, parameters={"spec": {}}, state=Scheduled(scheduled_time=later))
                try:
                    for _ in range(1200):  # a loaded embedded server delivers its events late
                        if Probe.passes:
                            break
                        await asyncio.sleep(0.1)
                finally:
                    await client.delete_flow_run(run.id)

    asyncio.run(scenario())
    assert Probe.passes >= 1, "the new job's Scheduled event did not start the runner's poll"

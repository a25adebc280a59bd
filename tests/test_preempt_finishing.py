"""An urgent job waits for a segment past its last epoch only for a bounded time.

A segment that has checkpointed its last epoch counts as stopping for nobody: its GPU frees
on its own, so an urgent job waits for it rather than preempting a second segment. When that
segment never exits (stopped with SIGSTOP in tests/test_cluster_nodes.py, or a hung final
upload), the urgent job waited for good and nobody was ever asked to stop: the cluster test
timed out "waiting for a preemption" whenever a normal job was frozen after its last epoch.
Past its grace (measured from its last checkpoint, as a victim's) it is a running segment
again, and the urgent job preempts the cheapest victim: the low job.
"""

from __future__ import annotations

import uuid

import pytest

from work_pools.inventory import GpuInfo
from work_pools.nodes import NodeRecord
from work_pools.pool_scheduler import PoolGpus
from work_pools.policy.model import Policy
from work_pools.scheduling import WorkerPolicy, schedule
from work_pools.segments import SegmentView
from yoloq.domain.tiers import Tier

NOW = 1_800_000_000.0
POLICY = WorkerPolicy(policy=Policy(min_runtime_s=0.0))  # the cluster test's YOLOQ_MIN_RUNTIME_S=0


def _node(name: str, gpu: str, mem: float) -> NodeRecord:
    return NodeRecord(name, (GpuInfo(0, f"{name}-0", gpu, mem, mem, kind="declared"),), NOW)


NODES = [_node("a", "A100-80GB", 80), _node("b", "V100-32GB", 32), _node("c", "CPU", 8)]


def _view(job: str, tier: Tier, epochs: int, labels: dict[str, str] | None = None) -> SegmentView:
    return SegmentView(uuid.uuid4(), f"{job}-s1", job, "default", tier, "full", 1.0, 2.0,
                       epochs, 0, epochs, NOW - 700, labels or {})


def _pass(placed: dict[str, SegmentView], waiting: list[SegmentView], now: float):
    """Each segment started 4 s before its last checkpoint (two 2-s epochs, as a tiny job's)."""
    pool = PoolGpus.of(NODES)
    running = list(placed.values())
    reserved = {v.flow_run_id: (pool.index_of[(node, 0)],) for node, v in placed.items()}
    started = {v.flow_run_id: (v.checkpoint_at or NOW) - 4.0 for v in running}
    return schedule(list(pool.gpus), running, waiting, reserved, started, now, POLICY,
                    nodes={i: n for i, (n, _) in pool.where.items()})


def _scenario(checkpoint_at: float):
    """low on one node, two normal jobs on the others; normal2 checkpointed its last epoch
    at `checkpoint_at` and has not exited since (frozen)."""
    low = _view("low", Tier.LOW, 2)
    normal1 = _view("normal1", Tier.NORMAL, 2)
    normal2 = _view("normal2", Tier.NORMAL, 2, {"yoloq.epoch": "2",
                                                 "yoloq.checkpoint_at": f"{checkpoint_at:.3f}"})
    urgent = _view("urgent2", Tier.URGENT, 1)
    return low, normal1, normal2, urgent


@pytest.mark.parametrize("where", [("c", "a", "b"), ("a", "b", "c"), ("b", "c", "a")],
                         ids=["low-on-c", "low-on-a", "low-on-b"])
def test_a_segment_frozen_past_its_last_epoch_does_not_hold_the_urgent_job_for_good(where):
    low, normal1, normal2, urgent = _scenario(checkpoint_at=NOW - 600)
    placed = dict(zip(where, (low, normal1, normal2)))
    decision = _pass(placed, [urgent], NOW)
    assert [s.flow_run_id for s in decision.preempt] == [low.flow_run_id], decision.waiting
    seg = next(s for s in decision.snapshot.running if s.job_id == "normal2")
    assert not seg.stopping  # past its grace: a running segment again


@pytest.mark.parametrize("where", [("c", "a", "b"), ("a", "b", "c")], ids=["low-on-c", "low-on-a"])
def test_a_segment_just_past_its_last_epoch_is_still_waited_for(where):
    """Unchanged: within its grace the finishing segment frees the GPU, nobody is asked."""
    low, normal1, normal2, urgent = _scenario(checkpoint_at=NOW - 5)
    decision = _pass(dict(zip(where, (low, normal1, normal2))), [urgent], NOW)
    assert decision.preempt == ()
    assert "frees when job normal2 stops" in decision.waiting[urgent.flow_run_id]


def test_the_wait_ends_after_the_grace_of_the_finishing_segment():
    """The same frozen segment, pass after pass: waited for until its grace (60 s: the
    minimum, its epochs took seconds) has passed since its last checkpoint, then the low
    job is asked, once."""
    low, normal1, normal2, urgent = _scenario(checkpoint_at=NOW)
    placed = {"c": low, "a": normal1, "b": normal2}
    asked_at = None
    for t in range(0, 120, 2):
        decision = _pass(placed, [urgent], NOW + t)
        if decision.preempt:
            asked_at = t
            assert [s.flow_run_id for s in decision.preempt] == [low.flow_run_id]
            break
    assert asked_at is not None and 60 <= asked_at <= 62, asked_at

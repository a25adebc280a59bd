"""The leader decides only on node reports newer than its last change there (issue 26).

Replays, without a server, the pool scheduler's side of the two-node race: the leader
changes a run on node A; A's next record is older than that change (it was published
while the labels were being written); in that pass nothing is admitted onto A and no
victim is chosen anywhere; once A reports again, the urgent job's single victim is asked.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from work_pools.inventory import GpuInfo
from work_pools.nodes import NodeRecord, heartbeat_every_s, report_is_fresh
from work_pools.pool_scheduler import PoolGpus, UNSETTLED_PREEMPT, settled
from work_pools.scheduling import WorkerPolicy, schedule
from yoloq.domain.tiers import Tier

from test_board import NOW, View  # noqa: E402  (the SegmentView fields scheduling reads)

POLICY = WorkerPolicy()


def record(name: str, heartbeat_at: float) -> NodeRecord:
    return NodeRecord(name, (GpuInfo(0, f"GPU-{name}", "NVIDIA A100-SXM4-80GB", 80, 80),), heartbeat_at)


def view(name: str, **kw: Any) -> View:
    return View(uuid.uuid4(), name, name.split(".")[0], est_mem_gb=60, **kw)


@pytest.mark.parametrize("heartbeat, changed, now, fresh", [
    pytest.param(NOW, None, NOW, True, id="no-change-yet"),
    pytest.param(NOW + 1, NOW, NOW + 2, True, id="published-after-the-change"),
    pytest.param(NOW - 1, NOW, NOW + 1, False, id="published-before-the-change"),
    pytest.param(NOW - 1, NOW, NOW + 2 * heartbeat_every_s(), True, id="clock-skew-bounded"),
])
def test_report_is_fresh(heartbeat, changed, now, fresh):
    assert report_is_fresh(record("a", heartbeat), changed, now) is fresh


def _pass(nodes: list[NodeRecord], running, pending, at_gpu, now):
    pool = PoolGpus.of(nodes)
    reserved = {v.flow_run_id: (pool.index_of[(node, 0)],) for v, node in zip(running, at_gpu)}
    started = {v.flow_run_id: now - 900 for v in running}
    decision = schedule(list(pool.gpus), running, pending, reserved, started, now, POLICY,
                        nodes={i: n for i, (n, _) in pool.where.items()})
    return pool, decision


def test_no_victim_while_a_node_report_predates_the_last_change_then_exactly_one():
    low, normal = view("low.s2", tier=Tier.LOW), view("normal.s1", tier=Tier.NORMAL)
    urgent = view("urgent.s1", tier=Tier.URGENT)
    changed_on_a = NOW - 0.5  # the leader admitted low.s2 onto A half a second ago
    stale = [record("a", NOW - 2.0), record("b", NOW - 0.1)]  # A's record predates it
    pool, decision = _pass(stale, [low, normal], [urgent], ["a", "b"], NOW)
    assert [s.flow_run_id for s in decision.preempt] == [low.flow_run_id]  # what decide wants
    unsettled = {n.name for n in stale if not report_is_fresh(n, {"a": changed_on_a}.get(n.name), NOW)}
    assert unsettled == {"a"}
    held, admits = settled(decision, decision.admit, unsettled, pool)
    assert not held.preempt and not held.raw.preempt and not admits
    assert held.waiting[urgent.flow_run_id] == UNSETTLED_PREEMPT

    fresh = [record("a", NOW + 1.0), record("b", NOW + 1.0)]  # A has reported since
    pool, decision = _pass(fresh, [low, normal], [urgent], ["a", "b"], NOW + 1.5)
    unsettled = {n.name for n in fresh if not report_is_fresh(n, changed_on_a, NOW + 1.5)}
    kept, _ = settled(decision, decision.admit, unsettled, pool)
    assert [s.flow_run_id for s in kept.preempt] == [low.flow_run_id]


def test_admissions_onto_a_settled_node_go_ahead():
    urgent, other = view("urgent.s1", tier=Tier.URGENT), view("other.s1", tier=Tier.NORMAL)
    nodes = [record("a", NOW - 2.0), record("b", NOW)]
    pool, decision = _pass(nodes, [], [urgent, other], [], NOW)
    assert len(decision.admit) == 2
    held, admits = settled(decision, decision.admit, {"a"}, pool)
    assert [pool.where[a.gpus[0]][0] for a in admits] == ["b"]
    assert [a.flow_run_id for a in held.admit] == [a.flow_run_id for a in admits]
    assert len(held.raw.admit) == 1
    (waiting_id,) = {urgent.flow_run_id, other.flow_run_id} - {a.flow_run_id for a in admits}
    assert "node a has not reported" in held.waiting[waiting_id]


def test_a_node_kept_unsettled_by_change_after_change_holds_the_pass_at_most_two_beats():
    from work_pools.pool_scheduler import PoolScheduler

    leader = PoolScheduler("yolo-gpu")
    beat = heartbeat_every_s()
    seen = []
    for step in range(4):  # each pass changes node a again just after a's latest record
        now = NOW + step * beat
        leader.changed_at["a"] = now - 0.1
        seen.append(leader._unsettled([record("a", now - 0.2), record("b", now)], now))
    assert seen == [{"a"}, {"a"}, set(), {"a"}]

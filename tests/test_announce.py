"""An urgent job's announcement: what the submit writes, what the leader reads from it, and
that `decide` preempts for it but nothing is ever started from it (pure; the stack scenario is
in test_preemption_stack.py)."""

from __future__ import annotations

import datetime
import json
import uuid
from types import SimpleNamespace

from work_pools.announce import LABEL, announce_labels, announced_view, withdrawn
from work_pools.inventory import GpuInfo
from work_pools.policy.model import Policy
from work_pools.pool_scheduler import STAND_IN_WAITING, PoolGpus, plan_pass, without_admits
from work_pools.segments import TIER_LABEL, SegmentView
from yoloq.domain.tiers import Tier

NOW = 1_800_000_000.0
PLAN = {"team": "oncall", "tier": "urgent", "job_class": "short", "est_mem_gb": 2.5, "est_epoch_s": 4.0,
        "epochs": 1, "epochs_done": 0, "submitted_at": None, "batch": 8, "fixed_mem_gb": 1.0,
        "mem_per_image_gb": 0.1}


def parent(labels: dict[str, str], job_id: str = "urgent-1") -> SimpleNamespace:
    created = datetime.datetime.fromtimestamp(NOW - 1, datetime.timezone.utc)
    return SimpleNamespace(id=uuid.uuid4(), labels=labels, created=created,
                           parameters={"job_id": job_id, "spec": {"team": "oncall", "epochs": 1}})


def test_only_an_urgent_plan_is_announced_and_without_its_submit_time():
    [(key, value)] = announce_labels(PLAN).items()
    assert key == LABEL and "submitted_at" not in json.loads(value)
    assert json.loads(value)["est_mem_gb"] == 2.5
    assert announce_labels({**PLAN, "tier": "high"}) == {}
    assert announce_labels(None) == {}


def test_an_announced_parent_stands_in_for_its_first_segment():
    run = parent(announce_labels(PLAN))
    view = announced_view(run)
    assert (view.flow_run_id, view.job_id, view.tier, view.team) == (run.id, "urgent-1", Tier.URGENT, "oncall")
    assert view.est_mem_gb == 2.5 and view.epochs_done == 0
    assert view.submitted_at == run.created.timestamp()  # the parent's creation, not the label's


def test_a_withdrawn_or_retiered_announcement():
    assert announced_view(parent(withdrawn())) is None
    assert announced_view(parent({})) is None
    assert announced_view(parent({LABEL: "{not json"})) is None
    retiered = announced_view(parent({**announce_labels(PLAN), TIER_LABEL: "normal"}))
    assert retiered.tier == Tier.NORMAL  # `yoloq retier` before its first segment


def _running_low(gpu: int) -> SimpleNamespace:
    plan = {"team": "vision", "tier": "low", "job_class": "full", "est_mem_gb": 2.0, "est_epoch_s": 30.0,
            "epochs": 10, "epochs_done": 0, "batch": 8}
    return SimpleNamespace(
        id=uuid.uuid4(), name="low.s1", state=SimpleNamespace(is_final=lambda: False),
        labels={"yoloq.node": "n1", "yoloq.gpus": str(gpu), "yoloq.epoch": "2",
                "yoloq.assigned_at": f"{NOW - 600:.3f}"},
        parameters={"job_id": f"low-{gpu}", "spec": {}, "plan": plan, "stop_after_epoch": 10},
        expected_start_time=None, created=datetime.datetime.fromtimestamp(NOW - 600, datetime.timezone.utc),
        start_time=datetime.datetime.fromtimestamp(NOW - 600, datetime.timezone.utc))


def _gpus(count: int) -> PoolGpus:
    from work_pools.nodes import NodeRecord

    gpus = [GpuInfo(index=i, uuid=f"u{i}", name="CPU", mem_total_gb=8, mem_free_gb=8, kind="declared")
            for i in range(count)]
    return PoolGpus.of([NodeRecord(name="n1", gpus=tuple(gpus), heartbeat_at=NOW)])


def test_the_leader_preempts_for_an_announcement_but_never_admits_it():
    from work_pools.scheduling import WorkerPolicy

    policy = WorkerPolicy(policy=Policy(min_runtime_s=0.0))
    stand_in: SegmentView = announced_view(parent(announce_labels(PLAN)))
    busy = _running_low(0)
    plan = plan_pass(_gpus(1), [busy], [], [], policy, NOW, extra_pending=(stand_in,))
    assert [stop.flow_run_id for stop in plan.decision.preempt] == [busy.id]
    assert plan.decision.preempt[0].by_job == "urgent-1"

    free = plan_pass(_gpus(2), [busy], [], [], policy, NOW, extra_pending=(stand_in,))
    assert [a.flow_run_id for a in free.decision.admit] == [stand_in.flow_run_id]  # decide would
    kept = without_admits(free.decision, {stand_in.flow_run_id})
    assert kept.admit == () and kept.raw.admit == ()  # the leader, the board and the ETAs do not
    assert kept.waiting[stand_in.flow_run_id] == STAND_IN_WAITING
    assert kept.raw.waiting[str(stand_in.flow_run_id)] == STAND_IN_WAITING
    assert free.decision.preempt == ()  # a free GPU: nobody is asked to stop


def test_an_urgent_parent_does_not_wait_at_the_runners_start_gate():
    from work_pools.job_runner import jumps_the_gate

    assert jumps_the_gate(SimpleNamespace(tags=["job:u", "team:oncall", "tier:urgent", "yoloq"]))
    assert not jumps_the_gate(SimpleNamespace(tags=["job:n", "team:vision", "tier:normal", "yoloq"]))

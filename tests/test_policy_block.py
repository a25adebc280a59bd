"""The `yoloq-policy` block: fields -> Policy, and resolution (block, env, defaults)."""

from __future__ import annotations

import uuid

import pytest

from work_pools.policy.model import Policy, Quota
from yoloq.domain.tiers import Tier


@pytest.fixture
def no_blocks(monkeypatch):
    from yoloq.settings import policy_env_names

    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "0")
    for key in policy_env_names().values():
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_block_fields_become_the_policy():
    from blocks.policy import SchedulingPolicy, TeamQuota

    block = SchedulingPolicy(
        team_weights={"vision": 2.0}, quotas={"nlp": TeamQuota(tu=20, period="week")},
        tier_caps={"oncall": "URGENT", "interns": "normal"}, default_tier_cap="high",
        min_runtime_s=120, aging_step_s=1800, long_job_share=0.6, long_job_window_s=7200,
        share_gpus=True, allow_reduced_batch=True, usage_half_life_s=3600,
        within_rank="submit", fair_share_mode="turns", urgent_overrides_min_runtime=True,
        min_grace_s=30, grace_epochs=3)
    policy = block.to_policy()
    assert policy.team_weights == {"vision": 2.0}
    assert policy.quotas == {"nlp": Quota(20, "week")}
    assert policy.tier_caps == {"oncall": Tier.URGENT, "interns": Tier.NORMAL}
    assert policy.default_tier_cap is Tier.HIGH
    assert (policy.min_runtime_s, policy.aging_step_s, policy.usage_half_life_s) == (120, 1800, 3600)
    assert (policy.long_job_share, policy.long_job_window_s) == (0.6, 7200)
    assert policy.share_gpus and policy.allow_reduced_batch
    assert (policy.within_rank, policy.fair_share_mode) == ("submit", "turns")
    assert policy.urgent_overrides_min_runtime and not policy.soft_preemption
    assert SchedulingPolicy(soft_preemption=True).to_policy().soft_preemption
    settings = block.to_settings("test")
    assert (settings.min_grace_s, settings.grace_epochs) == (30, 3)


def test_default_block_is_the_default_policy():
    from blocks.policy import SchedulingPolicy

    assert SchedulingPolicy().to_policy() == Policy()


@pytest.mark.parametrize("field", [
    pytest.param({"default_tier_cap": "critical"}, id="unknown-default-cap"),
    pytest.param({"tier_caps": {"a": "asap"}}, id="unknown-team-cap"),
    pytest.param({"quotas": {"a": {"tu": 5, "period": "month"}}}, id="unknown-period"),
    pytest.param({"quotas": {"a": {"tu": 0}}}, id="zero-quota"),
    pytest.param({"min_runtime_s": -1}, id="negative-runtime"),
    pytest.param({"within_rank": "las"}, id="unknown-within-rank"),
    pytest.param({"fair_share_mode": "lottery"}, id="unknown-fair-share-mode"),
])
def test_invalid_fields_are_rejected(field):
    from pydantic import ValidationError

    from blocks.policy import SchedulingPolicy

    with pytest.raises(ValidationError):
        SchedulingPolicy(**field)


def test_without_block_or_env_the_defaults_apply(no_blocks):
    from blocks.policy import resolve_policy_settings

    resolved = resolve_policy_settings()
    assert resolved.source == "defaults"
    assert resolved.policy == Policy()


def test_env_overrides_apply_without_a_block(no_blocks):
    from blocks.policy import resolve_policy_settings
    from work_pools.scheduling import WorkerPolicy

    no_blocks.setenv("YOLOQ_MIN_RUNTIME_S", "0")
    no_blocks.setenv("YOLOQ_GRACE_S", "15")
    no_blocks.setenv("YOLOQ_TIER_CAPS", "interns=normal, oncall=urgent")
    resolved = resolve_policy_settings()
    assert resolved.source == "environment"
    assert resolved.source_of("min_runtime_s") == "env YOLOQ_MIN_RUNTIME_S"
    assert resolved.source_of("aging_step_s") == "default"
    assert resolved.policy.min_runtime_s == 0
    assert resolved.policy.tier_caps == {"interns": Tier.NORMAL, "oncall": Tier.URGENT}
    assert (resolved.min_grace_s, resolved.grace_epochs) == (15, 2.0)
    worker = WorkerPolicy.from_env()
    assert (worker.policy, worker.min_grace_s, worker.source) == (resolved.policy, 15, "environment")


@pytest.fixture
def prefect_api(yoloq_stack):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: yoloq_stack.api_url}):
        yield yoloq_stack


@pytest.mark.service
def test_env_beats_the_saved_block_key_by_key(prefect_api, monkeypatch):
    """Explicit beats stored: YOLOQ_MIN_RUNTIME_S wins over the block's min_runtime_s, every
    other key keeps the block's value, and each key says where it came from. Saved under a
    test-only name, so the stack's worker never picks it up."""
    from blocks.policy import (
        SchedulingPolicy,
        TeamQuota,
        resolve_policy_settings,
        saved_block,
    )

    name = f"test-policy-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "1")
    monkeypatch.setenv("YOLOQ_MIN_RUNTIME_S", "0")
    monkeypatch.setenv("YOLOQ_TIER_CAPS", "oncall=urgent")
    for unset in ("YOLOQ_GRACE_S", "YOLOQ_GRACE_EPOCHS", "YOLOQ_AGING_STEP_S"):
        monkeypatch.delenv(unset, raising=False)
    SchedulingPolicy(quotas={"vision": TeamQuota(tu=3)}, min_runtime_s=900, aging_step_s=120,
                     tier_caps={"interns": "normal"}, min_grace_s=45).save(name, _sync=True)
    try:
        resolved = resolve_policy_settings(name)
        assert resolved.source == f"block {name} + environment"
        assert resolved.policy.min_runtime_s == 0  # YOLOQ_MIN_RUNTIME_S, not the block's 900
        assert resolved.source_of("min_runtime_s") == "env YOLOQ_MIN_RUNTIME_S"
        assert resolved.policy.aging_step_s == 120 and resolved.source_of("aging_step_s") == f"block {name}"
        assert resolved.policy.quotas == {"vision": Quota(3, "day")}
        assert resolved.min_grace_s == 45 and resolved.source_of("min_grace_s") == f"block {name}"
        # caps merge team by team: the block's interns cap stays beside the variable's oncall cap
        assert resolved.policy.tier_caps == {"interns": Tier.NORMAL, "oncall": Tier.URGENT}
        assert resolved.source_of("tier_caps") == f"block {name} + env YOLOQ_TIER_CAPS"
        monkeypatch.delenv("YOLOQ_MIN_RUNTIME_S")
        monkeypatch.delenv("YOLOQ_TIER_CAPS")
        stored = resolve_policy_settings(name)
        assert stored.source == f"block {name}" and stored.policy.min_runtime_s == 900
        assert saved_block(f"missing-{name}") is None
        assert resolve_policy_settings(f"missing-{name}").source == "defaults"
    finally:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            doc = client.read_block_document_by_name(name, "yoloq-scheduling-policy")
            client.delete_block_document(doc.id)


@pytest.mark.parametrize("overrides, preempted", [
    pytest.param(False, False, id="young-victim-protected"),
    pytest.param(True, True, id="urgent-overrides-min-runtime"),
])
def test_block_fields_reach_the_live_decision(overrides, preempted):
    """Block -> settings -> WorkerPolicy -> `schedule` (what the pool scheduler calls): a
    low job 60 s into its hold is preempted for an urgent one only when the block says so."""
    from test_board import NOW, one_slot, view

    from blocks.policy import SchedulingPolicy
    from work_pools.scheduling import WorkerPolicy, schedule

    settings = SchedulingPolicy(urgent_overrides_min_runtime=overrides).to_settings("test")
    worker_policy = WorkerPolicy(policy=settings.policy)
    low, urgent = view("low.s1", tier=Tier.LOW, est_mem_gb=60), view(
        "urgent.s1", tier=Tier.URGENT, est_mem_gb=60)
    decision = schedule(one_slot(), [low], [urgent], {low.flow_run_id: (0,)},
                        {low.flow_run_id: NOW - 60}, NOW, worker_policy)
    assert bool(decision.preempt) is preempted

"""Soft preemption (issue 13 item 4): with `soft_preemption`, an urgent segment shares a
lower-tier segment's GPU (the victim's batch shrinks at its next epoch boundary) instead of
evicting it; off by default."""

from __future__ import annotations

import pytest

from work_pools.policy import Policy, Snapshot, decide
from builders import make_gpus, make_job
from work_pools.policy.rules import accumulate_for, throttle_batch

NOW = 100_000.0


def victim(tier="low", batch=32, per_image=1.5, fixed=10.0, started=NOW - 1000):
    mem = fixed + batch * per_image
    return (make_job("v").tier(tier).mem(mem).batch(batch, per_image, fixed)
            .running_on(0, started=started, checkpoint=NOW - 60).obj())


def snapshot(running, waiting, gpus="1xA100-80GB"):
    cluster = make_gpus(gpus, used_gb={0: sum(s.est_mem_gb for s in running)})
    return Snapshot(cluster, tuple(running), tuple(waiting))


def urgent(mem=20.0):
    return make_job("u").tier("urgent").mem(mem).submitted(NOW - 5).obj()


SOFT = Policy(soft_preemption=True)


def test_off_by_default_the_victim_is_evicted():
    decision = decide(snapshot([victim()], [urgent()]), Policy(), NOW)
    assert [p.job_id for p in decision.preempt] == ["v"] and not decision.throttle


def test_throttle_instead_of_evict_when_memory_allows():
    decision = decide(snapshot([victim()], [urgent(mem=20.0)]), SOFT, NOW)
    assert not decision.preempt and not decision.admit
    (t,) = decision.throttle
    # 80 GB - 20 GB guest - 10 GB fixed = 50 GB -> 33 images at 1.5 GB; it had 32: kept
    assert (t.victim_job_id, t.for_job_id, t.new_batch, t.old_batch) == ("v", "u", 32, 32)
    assert "shares GPU 0 with job v" in decision.waiting["u/s1"]


def test_throttle_reduces_the_batch_and_keeps_the_effective_batch():
    decision = decide(snapshot([victim()], [urgent(mem=40.0)]), SOFT, NOW)
    (t,) = decision.throttle
    assert t.new_batch == 20  # (80 - 40 - 10) // 1.5
    assert "batch 32 -> 20, accumulate 2 -> 3" in t.reason
    assert accumulate_for(20) * 20 >= 64 - 20


@pytest.mark.parametrize("case, running, waiting, expect", [
    pytest.param("no-room", [victim(per_image=1.5, batch=32)], [urgent(mem=68.0)], "evict",
                 id="guest-too-big-evicts-instead"),
    pytest.param("same-tier", [victim(tier="urgent")], [urgent()], "wait",
                 id="never-throttles-an-equal-tier"),
    pytest.param("fresh", [victim(started=NOW - 10)], [urgent()], "throttle",
                 id="min-runtime-does-not-protect-from-sharing"),
])
def test_when_a_throttle_applies(case, running, waiting, expect):
    decision = decide(snapshot(running, waiting), SOFT, NOW)
    outcome = ("throttle" if decision.throttle else "evict" if decision.preempt else "wait")
    assert outcome == expect


def test_throttle_batch_rule():
    v = victim(batch=32, per_image=1.5, fixed=10.0)
    assert throttle_batch(v, 80.0, 70.0, SOFT) is None  # room 0
    assert throttle_batch(v, 80.0, 40.0, Policy(soft_min_batch=24)) is None  # 20 < 24
    no_model = make_job("x").running_on(0).obj()
    assert throttle_batch(no_model, 80.0, 10.0, SOFT) is None  # no memory model: no throttle


def test_a_throttled_gpu_is_not_given_to_a_second_guest():
    decision = decide(snapshot([victim()], [urgent(mem=20.0),
                                            make_job("u2").tier("urgent").mem(20.0).obj()]),
                      SOFT, NOW)
    assert len(decision.throttle) == 1

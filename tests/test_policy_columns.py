"""`decide` reads the waiting queue as numpy columns: the order and the reasons must be those
of the rules written one segment at a time (the reference below), whatever order the
snapshot lists the segments in."""

from __future__ import annotations

import random

from work_pools.policy import Policy, Quota, Segment, Snapshot, decide, effective_priority
from builders import make_gpus
from work_pools.policy.ordering import FairQueue, build_context
from yoloq.domain.tiers import Tier

NOW = 100_000.0


def _waiting(n: int, seed: int) -> list[Segment]:
    """Coarse values on purpose: many segments tie on rank, key and submission time."""
    rng = random.Random(seed)
    return [Segment(id=f"w{i:04d}", job_id=f"w{i:04d}", team=rng.choice("abc"),
                    tier=rng.choice(list(Tier)), submitted_at=NOW - 1000 * rng.randint(0, 3),
                    waiting_since=NOW - 2000 * rng.randint(0, 4), est_mem_gb=rng.choice([4, 12, 60]),
                    gpus=rng.choice([1, 1, 2]), est_remaining_s=rng.choice([600.0, 1200.0]),
                    measured_epoch_s=rng.choice([None, 30.0]), epoch=rng.randint(0, 4), epochs=10,
                    job_class=rng.choice(["short", "full"]), held_window_s=rng.choice([0, 13000, 13100, 13500, 14000]))
            for i in range(n)]


def _reference_key(seg: Segment, policy: Policy) -> tuple:
    """The order with fair share off, one segment at a time: rank, starving first, yielding
    last, then SRPT (remaining work aged by waiting), submission, id."""
    rank = effective_priority(seg, NOW, policy)
    starving = NOW - seg.waiting_since >= policy.max_aging_tiers * policy.aging_step_s
    work = seg.gpus * (seg.measured_epoch_s * (seg.epochs - seg.epoch) if seg.measured_epoch_s
                       else seg.est_remaining_s)
    key = work / (1.0 + max(0.0, NOW - seg.waiting_since) / policy.srpt_aging_s)
    return (rank, not starving, key, seg.submitted_at, seg.id)


def test_queue_order_matches_the_per_segment_rules_and_ignores_input_order():
    policy = Policy(fair_share=False, long_job_share=0.0, aging_step_s=3000.0)
    waiting = _waiting(400, seed=1)
    expected = [s.id for s in sorted(waiting, key=lambda s: _reference_key(s, policy))]
    for listed in (waiting, waiting[::-1], random.Random(2).sample(waiting, len(waiting))):
        snapshot = Snapshot(make_gpus("1xA100-80GB"), waiting=tuple(listed))
        order = [seg.id for seg, _ in FairQueue(build_context(snapshot, policy, NOW))]
        assert order == expected


def test_every_segment_left_unreached_gets_the_reason_of_its_kind():
    """One GPU, taken by the first segment: the 399 others are reasoned a kind at a time."""
    policy = Policy(quotas={"b": Quota(2.0), "c": Quota(1.0)}, aging_step_s=3000.0)
    waiting = tuple(_waiting(400, seed=3))
    snapshot = Snapshot(make_gpus("1xA100-80GB"), waiting=waiting, team_period_tu={"b": 4.0, "c": 5.0})
    decision = decide(snapshot, policy, NOW)
    admitted = {a.segment_id for a in decision.admit}
    assert len(admitted) == 1 and set(decision.waiting) == {s.id for s in waiting} - admitted
    over = {"b", "c"}
    rank = {s.id: effective_priority(s, NOW, policy, delayed=s.team in over) for s in waiting}
    short_ranks = {rank[s.id] for s in waiting if s.job_class == "short"}
    yielding = {s.id for s in waiting if s.job_class == "full" and rank[s.id] in short_ranks
                and s.held_window_s / policy.long_job_window_s > 0.7}  # the 70% rule
    shares = {f"{s.held_window_s / policy.long_job_window_s:.0%}" for s in waiting if s.id in yielding}
    assert len(shares) == 4, f"the seed gives yielding shares {shares}: each text needs its own kind"
    for seg in waiting:
        reason = decision.waiting.get(seg.id)
        if seg.id in admitted:
            continue
        if seg.gpus == 2:  # can never fit: that comes first
            assert reason == "waiting: needs 2 GPUs, the pool has 1", reason
        elif seg.team in ("b", "c"):  # two teams over quota: each reason names its own
            spent = {"b": "4.00 of 2.00", "c": "5.00 of 1.00"}[seg.team]
            assert reason.startswith(f"waiting: team over quota ({spent} TU"), reason
        elif seg.id in yielding:
            share = seg.held_window_s / policy.long_job_window_s
            assert reason == (f"waiting: yielding to short experiments (held a GPU {share:.0%} of "
                              f"the last 4.0 h)"), reason
        else:
            assert reason == f"waiting: no GPU with {seg.est_mem_gb:.1f} GB free", reason


def test_decision_lists_waiting_segments_in_queue_order():
    """Reached or not, the waiting segments come in the order the queue takes them."""
    policy = Policy(fair_share=False, long_job_share=0.0, aging_step_s=3000.0)
    waiting = _waiting(300, seed=4)
    expected = [s.id for s in sorted(waiting, key=lambda s: _reference_key(s, policy))]
    snapshot = Snapshot(make_gpus("1xA100-80GB"), waiting=tuple(waiting[::-1]))
    decision = decide(snapshot, policy, NOW)
    [admitted] = [a.segment_id for a in decision.admit]
    assert list(decision.waiting) == [i for i in expected if i != admitted]

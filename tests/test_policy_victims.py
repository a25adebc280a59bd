"""Victim choice on one consistent snapshot (issue 26): tier first, then least work lost,
across all nodes, every time; a victim already asked counts as freeing its GPUs.

The race this replays: two nodes, a low job on A and a normal job on B, one urgent job.
The low job is on its second segment; the usage book had not yet read its first segment
(the node's report of that segment's end arrived after the leader's pass began), so the
low job looked as if it had waited since its submission and started aged to high. Ranked
by that aged priority, the normal job was the "lowest" victim.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from work_pools.policy import Gpu, Policy, Snapshot, decide
from builders import make_gpus, make_job

NOW = 100_000.0
POLICY = Policy()  # the default: 5-minute aging, so a lagging usage book ages a job fast


def two_nodes() -> tuple[Gpu, ...]:
    return tuple(replace(g, node=name) for name in ("A", "B") for g in make_gpus("1xV100-32GB"))


def on(job_id: str, node: str, tier: str, *, submitted: float, started: float,
       checkpoint: float, team: str = "t") -> object:
    seg = (make_job(job_id).tier(tier).team(team).mem(8.0).submitted(submitted)
           .running_on(0, started=started, checkpoint=checkpoint).waiting_since(submitted).obj())
    return replace(seg, node=node, held_since=started - 1200)  # past the minimum runtime


def snapshot(running, waiting) -> Snapshot:
    gpus = tuple(replace(g, mem_free_gb=g.mem_total_gb - sum(
        s.est_mem_gb for s in running if s.node == g.node)) for g in two_nodes())
    return Snapshot(gpus, tuple(running), tuple(waiting))


def urgent():
    return make_job("urgent").tier("urgent").mem(8.0).submitted(NOW - 5).waiting_since(NOW - 5).obj()


# (low's view, normal's view): how the racy reports made each look
RACES = [
    pytest.param(dict(submitted=NOW - 1800, started=NOW - 60, checkpoint=NOW - 30),
                 dict(submitted=NOW - 900, started=NOW - 880, checkpoint=NOW - 20),
                 id="usage-book-lags-low-looks-aged"),
    pytest.param(dict(submitted=NOW - 1800, started=NOW - 60, checkpoint=NOW - 1),
                 dict(submitted=NOW - 900, started=NOW - 880, checkpoint=NOW - 600),
                 id="low-checkpointed-just-now-normal-long-ago"),
    pytest.param(dict(submitted=NOW - 100, started=NOW - 90, checkpoint=NOW - 30),
                 dict(submitted=NOW - 100, started=NOW - 90, checkpoint=NOW - 30),
                 id="consistent-reports"),
]


@pytest.mark.parametrize("low, normal", RACES)
def test_the_low_job_is_the_victim_whatever_order_the_reports_came_in(low, normal):
    running = [on("low", "A", "low", **low), on("normal", "B", "normal", **normal)]
    for order in (running, running[::-1]):  # node order in the snapshot does not matter
        decision = decide(snapshot(order, [urgent()]), POLICY, NOW)
        assert [p.job_id for p in decision.preempt] == ["low"]
        assert not decision.admit


def test_the_next_pass_asks_nobody_else_while_the_victim_stops():
    """Pass 1 asks the low job; pass 2 sees it stopping for the urgent job (B's report came
    first, A's not yet): its GPU counts as freeing, nobody else is asked."""
    low = on("low", "A", "low", submitted=NOW - 1800, started=NOW - 60, checkpoint=NOW - 30)
    normal = on("normal", "B", "normal", submitted=NOW - 900, started=NOW - 880, checkpoint=NOW - 20)
    first = decide(snapshot([low, normal], [urgent()]), POLICY, NOW)
    assert [p.job_id for p in first.preempt] == ["low"]
    asked = replace(low, stopping=True, stopping_for="urgent")
    for later in (NOW + 1, NOW + 30, NOW + 300):
        again = decide(snapshot([asked, normal], [urgent()]), POLICY, later)
        assert not again.preempt and not again.admit
        assert "frees when job low stops" in again.waiting["urgent/s1"]


@pytest.mark.parametrize("lost_a, lost_b, victim", [
    pytest.param(600, 60, "b", id="same-tier-least-work-lost"),
    pytest.param(60, 600, "a", id="same-tier-least-work-lost-other-node"),
    pytest.param(60, 60, "a", id="tie-broken-by-id"),
])
def test_same_tier_victims_least_work_lost_across_nodes(lost_a, lost_b, victim):
    running = [on("a", "A", "low", submitted=NOW - 3000, started=NOW - 2000, checkpoint=NOW - lost_a),
               on("b", "B", "low", submitted=NOW - 100, started=NOW - 90, checkpoint=NOW - lost_b)]
    for order in (running, running[::-1]):
        decision = decide(snapshot(order, [urgent()]), POLICY, NOW)
        assert [p.job_id for p in decision.preempt] == [victim]

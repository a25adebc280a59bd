"""Checkpoint frequency by cost (issue 13 item 5)."""

from __future__ import annotations

import pytest

from work_pools.policy.checkpoints import checkpoint_interval, should_checkpoint


@pytest.mark.parametrize("epoch_s, checkpoint_s, every, overhead_met, loss_met", [
    pytest.param(300.0, 0.5, 1, True, True, id="cheap-store-long-epochs-every-epoch"),
    pytest.param(10.0, 0.5, 3, True, True, id="short-epochs-batch-checkpoints"),
    pytest.param(2.0, 30.0, 285, False, True, id="slow-store-crash-bound-wins"),
    pytest.param(1200.0, 1.0, 1, True, False, id="epoch-longer-than-the-bound"),
])
def test_interval(epoch_s, checkpoint_s, every, overhead_met, loss_met):
    plan = checkpoint_interval(epoch_s, checkpoint_s)
    assert (plan.every_epochs, plan.overhead_met, plan.loss_met) == (every, overhead_met, loss_met)
    if plan.overhead_met:
        assert plan.overhead <= 0.02
    if plan.loss_met:
        assert plan.crash_loss_s <= 600.0


def test_smallest_interval_within_budget_is_chosen():
    plan = checkpoint_interval(10.0, 0.5)
    assert plan.every_epochs - 1 < 0.5 * 49 / 10.0 <= plan.every_epochs


@pytest.mark.parametrize("bad", [dict(epoch_s=0, checkpoint_s=1), dict(epoch_s=1, checkpoint_s=-1)])
def test_bad_input(bad):
    with pytest.raises(ValueError):
        checkpoint_interval(**bad)


def test_a_stopping_segment_always_checkpoints():
    plan = checkpoint_interval(10.0, 0.5)  # every 3 epochs
    assert [should_checkpoint(e, plan, stopping=False, segment_end=False) for e in range(1, 7)] == [
        False, False, True, False, False, True]
    assert should_checkpoint(4, plan, stopping=True, segment_end=False)
    assert should_checkpoint(5, plan, stopping=False, segment_end=True)

"""The one table of tasks (`yoloq.domain.tasks`): which task a run's metrics belong to, and
the curves the job page draws for it."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("logged, task", [
    pytest.param({"metrics/mAP50-95B", "train/box_loss"}, "detect", id="detect"),
    pytest.param({"metrics/mAP50-95B", "metrics/mAP50-95M"}, "segment", id="segment"),
    pytest.param({"metrics/mAP50-95B", "metrics/mAP50-95P"}, "pose", id="pose"),
    pytest.param({"metrics/accuracy_top1", "metrics/accuracy_top5"}, "classify", id="classify"),
    pytest.param(set(), "detect", id="nothing-yet"),
])
def test_a_runs_metrics_name_its_task_and_the_curves_it_draws(logged, task):
    from yoloq.domain.tasks import TASKS, task_of_metrics

    row = task_of_metrics(logged)
    assert row.name == task and row.curves[0] == (TASKS[task].metric if logged else "metrics/mAP50-95B")

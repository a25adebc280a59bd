"""The one admission verdict (`yoloq.service.admission.admit`) on its inputs: the analysis, the
tier cap and the fit, in that order; what could not be checked is said, never skipped silently.
No stack: the pool and the policy are given, as `pool_context` reads them from one."""

from __future__ import annotations

from pathlib import Path

import pytest

from work_pools.policy.model import Policy
from yoloq.analysis.fit import PoolGpu
from yoloq.datasets.synth import synth_dataset
from yoloq.domain.spec import parse_spec
from yoloq.domain.tiers import Tier
from yoloq.service.admission import (
    FIT,
    NO_LIVE_NODE_NOTE,
    NO_STACK_FIT_NOTE,
    NO_STACK_NOTE,
    SPEC,
    TIER_CAP,
    PoolContext,
    TierCapError,
    admit,
    unseen_pool,
)

SMALL = PoolGpu("node-a", "CPU", 8.0)
BIG = PoolGpu("node-b", "NVIDIA A100-SXM4-80GB", 80.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("admission") / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, seed=0, relative_path=True)
    return root


def _spec(dataset: Path, **fields):
    raw = {"name": "j", "team": "vision", "priority": "normal", "model": "yolov8n.yaml",
           "data": str(dataset / "data.yaml"), "epochs": 3, "imgsz": 64, "batch": 4, **fields}
    return parse_spec(raw)


def _pool(*gpus: PoolGpu, policy: Policy | None = None) -> PoolContext:
    return PoolContext(policy or Policy(), gpus, "live nodes" if gpus else "none")


def test_a_good_job_is_accepted_with_where_it_fits(dataset):
    verdict = admit(_spec(dataset), None, _pool(SMALL, BIG))
    assert verdict.accepted and verdict.refusal is None and verdict.notes == ()
    # the GPU taking the largest batch is named (`yoloq.analysis.fit.check_fit`)
    assert verdict.fit == {"source": "live nodes", "node": "node-b", "gpu": BIG.name, "batch": 4, "reduced": False}


def test_the_analysis_refuses_first(dataset):
    capped = Policy(tier_caps={"vision": Tier.LOW})
    verdict = admit(_spec(dataset, data=str(dataset / "nowhere.yaml")), None, _pool(policy=capped))
    assert not verdict.accepted and verdict.refused_by == SPEC and verdict.analysis is None
    assert verdict.refusal.field == "data"


def test_the_tier_cap_refuses_before_the_fit(dataset):
    capped = Policy(tier_caps={"vision": Tier.LOW})
    verdict = admit(_spec(dataset, model="yolo11x.yaml", imgsz=1280, batch=64), None, _pool(SMALL, policy=capped))
    assert verdict.refused_by == TIER_CAP and isinstance(verdict.refusal, TierCapError)
    assert verdict.refusal.line() == ("priority: team 'vision' may not submit normal jobs (most urgent "
                                      "allowed: low) (fix: use priority: low)")


def test_a_job_that_fits_no_gpu_of_the_pool_is_refused(dataset):
    verdict = admit(_spec(dataset, model="yolo11x.yaml", imgsz=1280, batch=64), None, _pool(SMALL))
    assert verdict.refused_by == FIT and verdict.analysis is not None
    assert "it fits no GPU in the pool: the largest, CPU on node node-a" in verdict.refusal.line()


def test_a_reduced_batch_is_accepted_with_a_note_when_the_policy_allows_it(dataset):
    lenient = Policy(allow_reduced_batch=True, min_reduced_batch=1)
    verdict = admit(_spec(dataset, model="yolov8x.yaml", imgsz=640, batch=64), None, _pool(SMALL, policy=lenient))
    assert verdict.accepted and verdict.fit["reduced"] and verdict.fit["batch"] < 64
    assert any("not exact resume" in note for note in verdict.notes)


def test_no_live_node_says_the_fit_was_not_checked(dataset):
    verdict = admit(_spec(dataset), None, _pool())
    assert verdict.accepted and verdict.fit is None and verdict.notes == (NO_LIVE_NODE_NOTE,)


def test_without_a_stack_the_cap_and_fit_are_named_as_not_checked(dataset):
    verdict = admit(_spec(dataset), None, unseen_pool(None))
    assert verdict.accepted and verdict.notes == (NO_STACK_NOTE, NO_STACK_FIT_NOTE)


def test_without_a_stack_a_gpu_type_stands_in_for_the_pool(dataset):
    big_job = _spec(dataset, model="yolo11x.yaml", imgsz=1280, batch=64)
    refused = admit(big_job, "T4", unseen_pool("T4"))
    assert refused.refused_by == FIT and "T4-16GB on node --gpu" in refused.refusal.line()
    assert admit(_spec(dataset), "T4", unseen_pool("T4")).fit["source"] == "--gpu"


def test_an_unknown_gpu_is_the_analysis_own_refusal(dataset):
    verdict = admit(_spec(dataset), "TPU-v5", unseen_pool("TPU-v5"))
    assert verdict.refused_by == SPEC and verdict.refusal.field == "gpu"


def test_the_analysis_only_verdict_needs_no_pool(dataset):
    verdict = admit(_spec(dataset), None, None)
    assert verdict.accepted and verdict.fit is None and verdict.notes == ()

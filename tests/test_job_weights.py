"""`model: job:<id>[:best|:last]` refusals, against a real checkpoint store folder: a malformed
reference, an unknown job and an unfinished one are each one line naming the job and the fix.
(Fine-tuning from a finished job through the stack: tests/test_finetune_stack.py.)"""

from __future__ import annotations

import pytest

from blocks.checkpoints import LocalCheckpointStore
from blocks.job_weights import job_weights, resolve_model
from yoloq.base.errors import SpecError, UserError
from yoloq.domain.spec import JobWeightsRef, parse_job_ref, parse_spec


def _spec(model: str):
    return parse_spec({"name": "ft", "team": "vision", "model": model, "data": "/nowhere/data.yaml"})


@pytest.mark.parametrize("model, ref", [
    ("job:cones-1a2b3c", JobWeightsRef("cones-1a2b3c", "best")),
    ("job:cones-1a2b3c:last", JobWeightsRef("cones-1a2b3c", "last")),
    ("yolov8n.yaml", None),
])
def test_references_parse(model, ref):
    assert parse_job_ref(model) == ref


@pytest.mark.parametrize("model", ["job:", "job:cones:worst", "job::best"])
def test_a_malformed_reference_is_refused_in_one_line(model):
    with pytest.raises(SpecError) as err:
        _spec(model)
    assert "job:<id>:best" in str(err.value) and "\n" not in str(err.value)


def test_a_model_that_is_not_a_reference_is_left_alone(tmp_path):
    spec = _spec("yolov8n.yaml")
    assert resolve_model(spec, store=LocalCheckpointStore(path=str(tmp_path))) is spec


def test_an_unknown_job_is_refused(tmp_path):
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    with pytest.raises(UserError, match="job:nope: no job of that id has weights") as err:
        job_weights(JobWeightsRef("nope"), store, tmp_path / "home")
    assert err.value.field == "model" and "yoloq status" in err.value.fix


def test_an_unfinished_job_is_refused(tmp_path):
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    partial = tmp_path / "epoch2.pt"
    partial.write_bytes(b"not yet")
    store.save_checkpoint("half", 2, partial, finished=False, target_epochs=5)
    with pytest.raises(UserError, match=r"job:half has not finished \(its newest checkpoint is epoch 2\)"):
        resolve_model(_spec("job:half:last"), store, tmp_path / "home")
    assert not (tmp_path / "home" / "job-weights").exists(), "nothing downloaded for a refusal"

"""The pieces of the bulk submit and the bench's stub engine that need no server: the dataset
check kept per request, the batch's size and refusal lines, and the stub's checkpoints and hooks."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.stub_segment import refusal, run_stub_segment, write_checkpoint
from yoloq.base.errors import DatasetError, UserError
from yoloq.service.bulk import BULK_LIMIT, BulkRefused, check_size, once_per_request, refusal_status


def test_a_dataset_is_checked_once_per_request_and_its_refusal_kept():
    calls: list[str] = []

    def validate(data, task="detect"):
        calls.append(f"{data}:{task}")
        if "bad" in str(data):
            raise DatasetError("data", f"{data} has no images", "add images")
        return {"data": data}

    check = once_per_request(validate)
    assert check("a.yaml", task="detect") is check("a.yaml", task="detect")
    check("a.yaml", task="segment")
    for _ in range(2):
        with pytest.raises(DatasetError, match="no images"):
            check("bad.yaml", task="detect")
    assert calls == ["a.yaml:detect", "a.yaml:segment", "bad.yaml:detect"]
    assert once_per_request(validate)("a.yaml", task="detect") == {"data": "a.yaml"}  # a new request reads again
    assert len(calls) == 4


@pytest.mark.parametrize("count, ok", [pytest.param(0, False, id="empty"), pytest.param(1, True, id="one"),
                                       pytest.param(BULK_LIMIT, True, id="limit"),
                                       pytest.param(BULK_LIMIT + 1, False, id="over")])
def test_batch_size(count, ok):
    if ok:
        check_size(count)
    else:
        with pytest.raises(UserError) as err:
            check_size(count)
        assert err.value.field == "jobs"


def test_a_refused_spec_names_its_index_and_that_nothing_was_created():
    exc = BulkRefused(7, UserError("epochs", "must be at least 1", "give epochs: 10"), "spec")
    assert exc.line() == ("jobs[7].epochs: must be at least 1 (fix: give epochs: 10; nothing was created; "
                          "fix that spec and send the batch again)")
    assert refusal_status(exc) == 422
    assert refusal_status(BulkRefused(0, UserError("priority", "above the cap"), "tier cap")) == 403


def test_the_stub_runs_only_on_declared_slots():
    assert refusal("8xA100-80GB:80") is None
    assert "YOLOQ_DECLARED_GPUS" in (refusal(None) or "") and "\n" not in refusal(None)


def test_stub_checkpoints_read_as_checkpoints(tmp_path: Path):
    from flows.segment import checkpoint_finished
    from yoloq.analysis.fingerprint import read_header

    mid = write_checkpoint(tmp_path / "e2.pt", 2, 3, batch=4)
    last = write_checkpoint(tmp_path / "e3.pt", 3, 3, batch=4)
    assert read_header(mid)["train_args"] == {"batch": 4}
    assert not checkpoint_finished(mid, 2, 3) and checkpoint_finished(last, 3, 3)


class Hooks:
    def __init__(self, stop_at: int | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.stop_at = stop_at

    def on_epoch_start(self, epoch):
        self.calls.append(("start", epoch))

    def on_epoch_end(self, epoch, metrics):
        self.calls.append(("end", epoch))

    def on_checkpoint(self, epoch, path):
        assert Path(path).is_file()
        self.calls.append(("checkpoint", epoch))

    def should_stop(self, epoch):
        self.calls.append(("ask", epoch))
        return epoch == self.stop_at


def test_the_stub_walks_the_epoch_boundaries_through_the_hooks(tmp_path: Path):
    hooks = Hooks()
    result = run_stub_segment(3, 4, 1, 3, tmp_path, hooks, 0.001)
    assert hooks.calls == [("start", 2), ("end", 2), ("checkpoint", 2), ("ask", 2),
                           ("start", 3), ("end", 3), ("checkpoint", 3)]
    assert (result.epochs_done, result.finished, result.stopped_early) == (3, True, False)


def test_the_stub_stops_when_preempted(tmp_path: Path):
    result = run_stub_segment(5, 4, 0, 4, tmp_path, Hooks(stop_at=2), 0.001)
    assert (result.epochs_done, result.finished, result.stopped_early) == (2, False, True)

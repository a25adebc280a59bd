"""Reduced-batch admissions reach the segment: a new job trains with the worker's reduced
batch (recorded on MLflow), a resumed job keeps the batch of its checkpoint."""

from __future__ import annotations

import logging

import pytest

from flows.segment import batch_for_segment
from yoloq.base.names import REDUCED_BATCH_ENV
from yoloq.engine import SegmentRequest, run_segment
from yoloq.domain.spec import parse_spec

pytestmark = pytest.mark.training


class Tags:
    def __init__(self) -> None:
        self.tags: dict[str, str] = {}

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.tags.update(tags)


def spec(data, batch: int):
    return parse_spec({"name": "rb", "team": "t", "model": "yolov8n.yaml", "data": str(data),
                       "epochs": 2, "imgsz": 64, "batch": batch,
                       "train_args": {"seed": 0, "workers": 0, "plots": False}})


LOG = logging.getLogger("test")


def test_new_job_takes_the_reduced_batch_and_records_it(tiny_dataset, monkeypatch):
    monkeypatch.setenv(REDUCED_BATCH_ENV, "2")
    tags = Tags()
    job = batch_for_segment(spec(tiny_dataset, 8), None, tags, "run", LOG)
    assert job.batch == 2 and tags.tags == {"yoloq.reduced_batch": "2"}


def test_without_a_reduction_nothing_changes(tiny_dataset, monkeypatch):
    monkeypatch.delenv(REDUCED_BATCH_ENV, raising=False)
    tags = Tags()
    original = spec(tiny_dataset, 8)
    assert batch_for_segment(original, None, tags, "run", LOG) is original and not tags.tags


def test_resumed_job_keeps_its_checkpoint_batch(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv(REDUCED_BATCH_ENV, "2")  # ignored: the job already has a batch
    started = run_segment(SegmentRequest(spec=spec(tiny_dataset, 4), workdir=tmp_path / "s1",
                                         stop_after_epoch=1))
    tags = Tags()
    job = batch_for_segment(spec(tiny_dataset, 8), started.checkpoint, tags, "run", LOG)
    assert job.batch == 4
    result = run_segment(SegmentRequest(spec=job, workdir=tmp_path / "s2", stop_after_epoch=2,
                                        resume_from=started.checkpoint))
    assert result.finished and result.epochs_done == 2

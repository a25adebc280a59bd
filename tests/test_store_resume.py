"""A truncated latest checkpoint in the store: the next segment resumes from the previous one
(with a warning), the job still ends with every epoch trained, and the epoch ledger records
the one epoch trained again (its first training is in the truncated checkpoint's metadata,
which is still readable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blocks.checkpoints import LocalCheckpointStore
from flows.epoch_ledger import EpochLedger
from yoloq.engine import SegmentRequest, run_segment
from yoloq.records.jobs import epoch_trainings, trainings_per_epoch
from yoloq.domain.spec import parse_spec

pytestmark = pytest.mark.training


class StoreHooks:
    """What the segment flow does at each boundary, minus MLflow: save with the ledger."""

    def __init__(self, store, job_id: str, segment: str) -> None:
        self.store, self.job_id, self.epochs = store, job_id, []
        newest = store.latest(job_id)  # newest readable metadata, even if its data is damaged
        self.ledger = EpochLedger(job_id, segment, newest.trainings if newest else ())

    def on_epoch_start(self, epoch: int) -> None:
        self.ledger.start(epoch)

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.epochs.append(epoch)
        self.ledger.end(epoch)

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        self.store.save_checkpoint(self.job_id, epoch, path, trainings=self.ledger.records)

    def should_stop(self, epoch: int) -> bool:
        return False


def test_truncated_latest_checkpoint_falls_back_to_previous(tiny_dataset, tmp_path, caplog):
    spec = parse_spec({"name": "trunc", "team": "t", "model": "yolov8n.yaml",
                       "data": str(tiny_dataset), "epochs": 3, "imgsz": 64, "batch": 4,
                       "train_args": {"seed": 0, "workers": 0, "plots": False}})
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    first = StoreHooks(store, "trunc", "segment-1")
    run_segment(SegmentRequest(spec=spec, workdir=tmp_path / "s1", stop_after_epoch=2), first)
    assert first.epochs == [1, 2]

    latest = store.latest("trunc")
    stored = store._file(latest.key)
    stored.write_bytes(stored.read_bytes()[: stored.stat().st_size // 3])  # torn write / bad disk

    restored = store.restore("trunc", tmp_path / "restore")
    assert restored.info.epoch == 1
    assert restored.warnings and "epoch" in restored.warnings[0]

    second = StoreHooks(store, "trunc", "segment-2")
    result = run_segment(SegmentRequest(spec=spec, workdir=tmp_path / "s2", stop_after_epoch=3,
                                        resume_from=restored.path), second)
    assert second.epochs == [2, 3], "resumes after epoch 1: epoch 2 is redone once, none skipped"
    assert result.finished and result.epochs_done == 3
    ledger = epoch_trainings("trunc", store)
    assert trainings_per_epoch(ledger) == {1: 1, 2: 2, 3: 1}, "the retrained epoch is recorded"
    assert [r.segment for r in ledger if r.epoch == 2] == ["segment-1", "segment-2"]

"""Fault matrix, disk family: the node's scratch folder fills up mid-training. The segment
stops with one clear line (a transient failure: the flow ends it Crashed and the parent
queues it again), nothing in the store is corrupted, and the job resumes from its last good
checkpoint once there is room, each epoch trained once according to the epoch ledger.

The scratch folder is a real 300 MB tmpfs mount (needs root, as in CI's container); it is
filled with a ballast file when epoch 1 is reported, so epoch 2's checkpoint cannot be written."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from fault_helpers import FaultAfterEpoch, report

pytestmark = [pytest.mark.integration, pytest.mark.training]


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "scratch"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a small tmpfs (needs root): {done.stderr.strip()}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path, leave_bytes: int = 2 << 20) -> Path:
    """A ballast file taking all but `leave_bytes` of the folder's file system."""
    ballast = folder / "ballast"
    stat = os.statvfs(folder)
    size = max(0, stat.f_bavail * stat.f_frsize - leave_bytes)
    with open(ballast, "wb") as fh:
        for _ in range(size // (1 << 20)):
            fh.write(b"\0" * (1 << 20))
    return ballast


def test_scratch_disk_full_fails_clearly_and_the_job_resumes(small_disk, tiny_dataset, tmp_path):
    from blocks.checkpoints import LocalCheckpointStore
    from yoloq.base.retry import is_transient, one_line
    from flows.segment import _train
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch
    from yoloq.domain.spec import parse_spec
    from yoloq.records.tracking import JobTracker

    spec = parse_spec({"name": "disk-full", "team": "faults", "model": "yolov8n.yaml",
                       "data": str(tiny_dataset), "epochs": 4, "imgsz": 64, "batch": 4,
                       "train_args": {"seed": 0, "workers": 0, "plots": False}})
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    tracker = JobTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "faults")
    run_id = tracker.run_for_job("disk-full")
    ballast: list[Path] = []
    logger = FaultAfterEpoch(1, lambda: ballast.append(_fill(small_disk)))
    with pytest.raises(OSError) as failure:
        _train(spec, "disk-full", 3, {"epochs_done": 0}, small_disk / "one", store, tracker,
               run_id, "segment-1", logger)
    line = one_line(failure.value)
    assert is_transient(failure.value) and "No space left" in line and "\n" not in line, line
    assert [c.epoch for c in store.list("disk-full")] == [1]
    assert store.restore("disk-full", tmp_path / "check").info.epoch == 1, "the store is intact"

    ballast[0].unlink()
    subprocess.run(["rm", "-rf", str(small_disk / "one")], check=True)  # the flow's own cleanup
    summary = _train(spec, "disk-full", 3, {"epochs_done": 1}, small_disk / "two", store, tracker,
                     run_id, "segment-2", logging.getLogger("t"))
    assert summary["start_epoch"] == 1 and summary["epochs_done"] == 3
    counts = trainings_per_epoch(epoch_trainings("disk-full", store))
    assert counts == {1: 1, 2: 1, 3: 1}
    report("scratch disk full", failure=line[:100], resumed_from_epoch=1,
           epochs_retrained="1 (epoch 2, never checkpointed, not in the ledger)")

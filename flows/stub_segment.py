"""Bench only: a segment engine that sleeps instead of training (`YOLOQ_BENCH_STUB_SEGMENT_S`).

`bench/scale.py` measures the control plane (submission, scheduling decisions, the job
runner, the node agents, the REST API) with thousands of jobs on declared GPUs; real training
would measure the host's CPU instead. The stub keeps everything of a segment but the
training: the segment flow restores the job's checkpoint, checks the plan, and this engine
walks the same epoch boundaries as the real one, through the same hooks (epoch ledger,
MLflow metrics, a checkpoint saved to the store after every epoch, the preemption check),
sleeping `seconds_per_epoch` for each epoch. Its checkpoints are tiny torch-style zips whose
header says the epoch and whether it is resumable, so `read_header` and the store treat them
as any checkpoint. A finished stub job is finalised without evaluate or export (there are no
weights): its MLflow run is ended and its segment labelled finalised, as `finalise` does.

It is refused on a node with real GPUs (no `YOLOQ_DECLARED_GPUS`): a production node cannot
run it by accident, and the segment says so in one line.
"""

from __future__ import annotations

import io
import pickle
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STUB_MARK = "yoloq-bench-stub"  # in every stub checkpoint's header


@dataclass(frozen=True)
class StubResult:
    """The fields of `yoloq.engine.SegmentResult` the segment flow reads."""

    epochs_done: int
    finished: bool
    stopped_early: bool
    save_dir: Path
    best: Path | None = None


def refusal(declared_gpus: str | None) -> str | None:
    """Why the stub may not run here (None: it may): only on a node of declared slots."""
    if declared_gpus:
        return None
    return ("YOLOQ_BENCH_STUB_SEGMENT_S: the bench's stub engine runs only on a node of declared "
            "slots (YOLOQ_DECLARED_GPUS); unset it on a node with real GPUs")


def write_checkpoint(path: Path, epoch: int, epochs: int, batch: int) -> Path:
    """A tiny checkpoint `read_header` reads: epoch, resumable unless the job is done."""
    header = {"model": None, "ema": None, "epoch": epoch - 1, "train_args": {"batch": batch},
              "yoloq": {"resumable": epoch < epochs, "stub": STUB_MARK}}
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("stub/data.pkl", pickle.dumps(header, protocol=2))
    path.write_bytes(buffer.getvalue())
    return path


def run_stub_segment(epochs: int, batch: int, start: int, stop_after_epoch: int, workdir: Path,
                     hooks: Any, seconds_per_epoch: float) -> StubResult:
    """Epochs start+1 .. stop_after_epoch, each a sleep, reported through `hooks` as the real
    engine reports them (start, end with metrics, checkpoint, preemption check)."""
    done = start
    for epoch in range(start + 1, stop_after_epoch + 1):
        hooks.on_epoch_start(epoch)
        time.sleep(seconds_per_epoch)
        done = epoch
        hooks.on_epoch_end(epoch, {"metrics/mAP50(B)": 0.0, "train/box_loss": 0.0})
        hooks.on_checkpoint(epoch, write_checkpoint(workdir / f"epoch-{epoch}.pt", epoch, epochs, batch))
        if epoch < stop_after_epoch and hooks.should_stop(epoch):
            return StubResult(done, False, True, workdir)
    return StubResult(done, done >= epochs, False, workdir)


def finalise_stub(tracker: Any, run_id: str, epoch: int) -> dict[str, Any]:
    """What `flows.stages.finalise` leaves behind, without weights to evaluate or export: the
    job's MLflow run ended, this segment labelled finalised at `epoch`."""
    from flows.stages import mark_finalised

    tracker.finish(run_id)
    mark_finalised(epoch)
    return {"stub": True}

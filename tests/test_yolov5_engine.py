"""The yolov5 engine: original YOLOv5 trained through the yolov5 package, behind the segment protocol.

One tiny real job (yolov5n from the package's YAML, 16 synthetic 64-px images, batch 8, 3 epochs,
CPU), every segment in a fresh `python tests/segment_cli.py` process, as a worker runs it:

- A: epochs [0, 2) in one segment;
- B: epochs [0, 3) asked to stop after epoch 1 (preemption), then resumed from the checkpoint
  moved to another folder for [1, 2), then resumed again to the end [2, 3).

A and B must hold bit-identical fp32 weights, EMA and optimizer state after epoch 2. The network
guard (tests/netguard, loaded by every child process) fails the test on any non-loopback attempt.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from yoloq.analysis.fingerprint import fingerprint
from yoloq.engine import SegmentRequest, run_segment
from yoloq.base.errors import UserError
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

SEGMENT_CLI = Path(__file__).resolve().parent / "segment_cli.py"  # the test-only segment runner

YOLOV5N = Path(importlib.util.find_spec("yolov5").origin).parent / "models" / "yolov5n.yaml"
EPOCHS, IMAGES, BATCH, IMGSZ = 3, 16, 8, 64
# About 70 s of CPU for the four segments; on a shared, loaded 2-core box the wall time has
# passed the suite's 600 s default, so the training tests (the first one builds the job) get more.
TRAINING_TIMEOUT_S = 1800


def _spec_dict(data: Path, **train_args) -> dict:
    return {"name": "v5job", "team": "vision", "model": str(YOLOV5N), "data": str(data), "epochs": EPOCHS,
            "imgsz": IMGSZ, "batch": BATCH, "train_args": {"seed": 3, **train_args}}


def _segment(spec: Path, workdir: Path, stop_after: int, resume: Path | None = None,
             stop_at: int | None = None) -> dict:
    result = workdir.parent / f"{workdir.name}.json"
    argv = [sys.executable, str(SEGMENT_CLI), "--spec", str(spec), "--workdir", str(workdir),
            "--stop-after", str(stop_after), "--result", str(result)]
    argv += ["--resume-from", str(resume)] if resume else []
    argv += ["--stop-at", str(stop_at)] if stop_at else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("yolov5-engine")
    data = synth_dataset(root / "ds", train=IMAGES, val=4, imgsz=IMGSZ, seed=0)
    spec = root / "job.yaml"
    spec.write_text(yaml.safe_dump(_spec_dict(data)))
    a = _segment(spec, root / "a", stop_after=2)
    b1 = _segment(spec, root / "b1", stop_after=EPOCHS, stop_at=1)
    moved = root / "elsewhere" / "epoch1.pt"
    moved.parent.mkdir()
    shutil.move(b1["result"]["checkpoint"], moved)  # the store hands a segment a file in a new place
    b2 = _segment(spec, root / "b2", stop_after=2, resume=moved)
    b3 = _segment(spec, root / "b3", stop_after=EPOCHS, resume=Path(b2["result"]["checkpoint"]))
    return {"root": root, "spec": spec, "data": data, "a": a, "b1": b1, "moved": moved, "b2": b2, "b3": b3}


def _exact(path: str | Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)["yoloq"]


def _max_abs_diff(left: dict, right: dict) -> float:
    assert left.keys() == right.keys()
    return max(float((left[k].double() - right[k].double()).abs().max()) for k in left)


@pytest.mark.training
@pytest.mark.timeout(TRAINING_TIMEOUT_S)
def test_split_segments_are_bit_identical_to_one_segment(job):
    one, split = _exact(job["a"]["result"]["checkpoint"]), _exact(job["b2"]["result"]["checkpoint"])
    assert one["epochs_done"] == split["epochs_done"] == 2
    assert _max_abs_diff(one["model"], split["model"]) == 0.0
    assert _max_abs_diff(one["ema"], split["ema"]) == 0.0
    assert one["ema_updates"] == split["ema_updates"]
    momentum = {str(k): v["momentum_buffer"] for k, v in one["optimizer"]["state"].items()}
    momentum_split = {str(k): v["momentum_buffer"] for k, v in split["optimizer"]["state"].items()}
    assert _max_abs_diff(momentum, momentum_split) == 0.0


@pytest.mark.training
@pytest.mark.timeout(TRAINING_TIMEOUT_S)
def test_segments_follow_the_protocol(job):
    a, b1, b2, b3 = job["a"], job["b1"], job["b2"], job["b3"]
    assert [e["epoch"] for e in a["epochs"]] == [1, 2] and a["checkpoints"] == [1, 2]
    assert a["result"]["epochs_done"] == 2 and not a["result"]["finished"] and not a["result"]["stopped_early"]
    assert b1["result"]["stopped_early"] and b1["result"]["epochs_done"] == 1 and b1["checkpoints"] == [1]
    assert [e["epoch"] for e in b2["epochs"]] == [2] and b2["result"]["epochs_done"] == 2
    assert b3["result"]["finished"] and b3["result"]["epochs_done"] == EPOCHS and b3["checkpoints"] == [EPOCHS]
    assert Path(b3["result"]["best"]).is_file()
    metrics = b2["epochs"][0]["metrics"]
    assert {"train/box_loss", "train/obj_loss", "metrics/mAP50(B)", "metrics/mAP50-95(B)", "lr/pg0"} <= set(metrics)


@pytest.mark.training
@pytest.mark.timeout(TRAINING_TIMEOUT_S)
def test_checkpoints_fingerprint_as_yolov5(job):
    resumable = fingerprint(job["moved"])
    assert (resumable.family, resumable.engine, resumable.scale) == ("yolov5", "yolov5", "n")
    assert resumable.resumable and resumable.epochs_done == 1 and resumable.epochs_planned == EPOCHS
    assert resumable.names == ("rectangle", "ellipse", "triangle")
    final = fingerprint(job["b3"]["result"]["checkpoint"])
    assert final.family == "yolov5" and not final.resumable  # stripped by yolov5 at the end


@pytest.mark.training
@pytest.mark.timeout(TRAINING_TIMEOUT_S)
def test_history_follows_the_job_across_folders(job):
    """results.csv and best.pt are carried in the checkpoint into each new workdir."""
    rows = (Path(job["b3"]["result"]["save_dir"]) / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + EPOCHS
    assert [int(r.split(",")[0]) for r in rows[1:]] == [0, 1, 2]


@pytest.mark.training
@pytest.mark.timeout(TRAINING_TIMEOUT_S)
def test_resume_refuses_another_recipe(job, tmp_path):
    spec = parse_spec({**_spec_dict(job["data"]), "batch": 4})
    with pytest.raises(UserError, match="spec.batch: checkpoint was trained with batch=8"):
        run_segment(SegmentRequest(spec=spec, workdir=tmp_path / "w", stop_after_epoch=EPOCHS,
                                   resume_from=Path(job["b2"]["result"]["checkpoint"])))


@pytest.mark.parametrize("train_args, field", [
    pytest.param({"close_mosaic": 5}, "train_args.close_mosaic", id="ultralytics-only-arg"),
    pytest.param({"optimizer": "auto"}, "train_args.optimizer", id="optimizer-auto"),
])
def test_yolov5_refuses_arguments_it_has_not(train_args, field, tmp_path):
    data = synth_dataset(tmp_path / "ds", train=2, val=1, imgsz=IMGSZ)
    spec = parse_spec(_spec_dict(data, **train_args))
    with pytest.raises(UserError) as caught:
        run_segment(SegmentRequest(spec=spec, workdir=tmp_path / "w", stop_after_epoch=1))
    assert caught.value.line().startswith(f"{field}: ")


def test_missing_weights_are_never_downloaded(tmp_path):
    """The patched attempt_download refuses a missing .pt with one line; the guard sees no attempt."""
    from yoloq.engine.yolov5 import environment

    environment.apply()
    with environment.patched(environment.Captured(), amp=False) as train:
        with pytest.raises(UserError, match="nothing is downloaded"):
            train.attempt_download(str(tmp_path / "yolov5s.pt"))
        assert train.attempt_download_from_hub("ultralytics/yolov5") is None
    import yolov5.train as train_module

    assert train_module.attempt_download is not environment.local_file  # restored afterwards


@pytest.mark.parametrize("epoch, batch, nb, expect", [
    pytest.param(3, 8, 2, 1, id="early-warmup-still-1"),
    pytest.param(5, 8, 2, 2, id="warmup-ramp-2"),
    pytest.param(200, 8, 2, 8, id="after-warmup-64/8"),
    pytest.param(200, 16, 50, 4, id="after-warmup-64/16"),
    pytest.param(200, 43, 50, 1, id="batch-43-exact"),
    pytest.param(200, 64, 50, 1, id="nominal-batch"),
])
def test_accumulate_at_boundaries_follows_yolov5(epoch, batch, nb, expect):
    from yoloq.engine.yolov5.exactness import accumulate_at, boundary_problem

    assert accumulate_at(epoch, batch, nb, warmup_epochs=3.0) == expect
    assert (boundary_problem(epoch, batch, nb, 3.0) is None) == (expect == 1)


def test_an_inexact_resume_boundary_is_logged(tmp_path, caplog):
    import argparse

    from yoloq.engine.yolov5 import environment
    from yoloq.engine.yolov5.segment import _Run

    data = synth_dataset(tmp_path / "ds", train=2, val=1, imgsz=IMGSZ)
    request = SegmentRequest(spec=parse_spec(_spec_dict(data)), workdir=tmp_path / "w", stop_after_epoch=1)
    run = _Run(request, None, environment.Captured(), opt=argparse.Namespace(hyp={"warmup_epochs": 3.0}))
    with caplog.at_level("WARNING", logger="yoloq.engine.yolov5"):
        run.epoch = 1
        run._warn_if_inexact(batches_per_epoch=2)  # accumulate 1 there: exact, nothing said
        assert not caplog.records
        run.epoch = 5
        run._warn_if_inexact(batches_per_epoch=2)  # accumulate 2
    assert "resuming at epoch 5 may not be bit-exact" in caplog.text

"""`yoloq extend` in the engine: a job trained to its 3 epochs, finished, then extended to 5.

Semantics (docs/concepts/extend.md): epochs already trained keep the schedule they were trained
under; from the extension on, the LR schedule (and close_mosaic's window) is the new total's,
as if the job had asked for 5 from the start. So:

- the extended job trained in two more segments (4, then 5; each a fresh process) ends
  bit-identical to the same extension trained in one segment (3 -> 5): the finished
  checkpoint's state (optimizer included) carries over exactly, and the finalisation at
  epoch 3 leaves nothing behind that changes training;
- epochs 4 and 5 get the learning rates of a job that asked for 5 epochs from the start;
- a finished checkpoint is still refused for the total it finished at, and a shrinking
  total is refused.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from test_exact_resume import exact_weights, run_cli
from yoloq.base.errors import UserError
from yoloq.datasets.synth import synth_dataset

pytestmark = pytest.mark.training

TRAIN_ARGS = {"seed": 3, "plots": False, "close_mosaic": 1, "nbs": 8, "workers": 0}


def _spec(root: Path, data: Path, epochs: int) -> Path:
    path = root / f"spec-{epochs}.yaml"
    path.write_text(yaml.safe_dump({"name": "extend", "team": "engine", "model": "yolov8n.yaml",
                                    "data": str(data), "epochs": epochs, "imgsz": 64, "batch": 4,
                                    "train_args": TRAIN_ARGS}))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """(the data, the finished epoch-3 checkpoint as the segment reported it to the store)."""
    root = tmp_path_factory.mktemp("extend")
    data = synth_dataset(root / "data", train=16, val=8, imgsz=64, nc=3, seed=0)
    out = run_cli(_spec(root, data, 3), root / "three", 3, keep=root / "kept")
    assert out["result"]["finished"] and out["result"]["epochs_done"] == 3
    return data, root / "kept" / "epoch3.pt"


def _lrs(save_dir: Path) -> dict[int, tuple[str, ...]]:
    with open(save_dir / "results.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {int(float(r["epoch"])): tuple(r[k] for k in sorted(r) if k.strip().startswith("lr/"))
            for r in rows}


def test_an_extended_job_trains_on_exactly_with_the_new_totals_schedule(finished, tmp_path):
    data, three = finished
    five = _spec(tmp_path, data, 5)
    fourth = run_cli(five, tmp_path / "four", 4, resume_from=three, keep=tmp_path / "kept4")
    assert fourth["result"]["epochs_done"] == 4 and not fourth["result"]["finished"]
    split = run_cli(five, tmp_path / "five", 5, resume_from=tmp_path / "kept4" / "epoch4.pt")
    whole = run_cli(five, tmp_path / "whole", 5, resume_from=three)
    assert split["result"]["finished"] and whole["result"]["finished"]

    expected, actual = exact_weights(Path(whole["result"]["checkpoint"])), exact_weights(
        Path(split["result"]["checkpoint"]))
    for part in ("model", "ema"):
        differing = [k for k, t in expected[part].items() if not torch.equal(t, actual[part][k])]
        assert not differing, f"{part}: {len(differing)} tensors differ, e.g. {differing[:3]}"
    assert [e["epoch"] for e in fourth["epochs"] + split["epochs"]] == [4, 5]

    # the schedule from epoch 4 on is a 5-epoch job's: the same learning rates as one from scratch
    scratch = run_cli(five, tmp_path / "scratch", 5)
    extended_lr, scratch_lr = _lrs(Path(whole["result"]["save_dir"])), _lrs(Path(scratch["result"]["save_dir"]))
    assert [extended_lr[e] for e in (4, 5)] == [scratch_lr[e] for e in (4, 5)]
    assert extended_lr[3] != scratch_lr[3], "epoch 3 was trained under the 3-epoch schedule"


def test_a_finished_checkpoint_is_refused_unless_the_total_grew(finished, tmp_path):
    from yoloq.engine.checkpoint import read_resume_point

    _, three = finished
    with pytest.raises(UserError, match="finished job's checkpoint"):
        read_resume_point(three, 3)
    assert read_resume_point(three, 5).epochs_done == 3
    saved = torch.load(three, map_location="cpu", weights_only=False)["yoloq"]
    assert saved["optimizer"] is not None and not saved["resumable"]


def test_a_shrinking_total_is_refused(finished, tmp_path):
    from yoloq.domain.spec import load_spec
    from yoloq.engine.segment import SegmentRequest, _resume_point

    data, three = finished
    spec = load_spec(_spec(tmp_path, data, 2))
    with pytest.raises(UserError, match="finished job's checkpoint"):
        _resume_point(SegmentRequest(spec=spec, workdir=tmp_path / "w", stop_after_epoch=2,
                                     resume_from=three))

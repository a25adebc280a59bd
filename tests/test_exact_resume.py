"""Exact resume: a job trained in segments, each a fresh process resuming from a
moved checkpoint, ends bit-identical to the same job trained in one go.

The split points cover a boundary inside the mosaic phase (epoch 1), the
mosaic-closing boundary (epoch 2) and one after it (epoch 3); warmup spans all of
them, and nbs=8 with batch 4 makes the optimizer accumulate two batches per step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from yoloq.datasets.synth import synth_dataset

SEGMENT_CLI = Path(__file__).resolve().parent / "segment_cli.py"  # the test-only segment runner

pytestmark = pytest.mark.training

EPOCHS = 4
TRAIN_ARGS = {"seed": 3, "plots": False, "close_mosaic": 2, "nbs": 8, "workers": 0}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exact")
    data = synth_dataset(root / "data", train=16, val=8, imgsz=64, nc=3, seed=0)
    spec = {"name": "exact", "team": "engine", "model": "yolov8n.yaml", "data": str(data),
            "epochs": EPOCHS, "imgsz": 64, "batch": 4, "train_args": TRAIN_ARGS}
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_cli(spec: Path, workdir: Path, stop_after: int, resume_from: Path | None = None,
            keep: Path | None = None) -> dict:
    """One segment in a fresh Python process; returns its result and reported epochs (`keep`:
    a folder for a copy of each checkpoint as the segment reported it, before final_eval)."""
    result = workdir.with_suffix(".json")
    cmd = [sys.executable, str(SEGMENT_CLI), "--spec", str(spec),
           "--workdir", str(workdir), "--stop-after", str(stop_after), "--result", str(result)]
    if resume_from is not None:
        cmd += ["--resume-from", str(resume_from)]
    if keep is not None:
        cmd += ["--keep", str(keep)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(result.read_text())


def train_in_segments(spec: Path, root: Path, sizes: list[int]) -> tuple[Path, list[dict]]:
    """Run consecutive segments; move each checkpoint to a new folder before resuming."""
    done, checkpoint, epochs = 0, None, []
    for index, size in enumerate(sizes):
        done += size
        out = run_cli(spec, root / f"segment{index}", done, checkpoint)
        epochs += out["epochs"]
        assert out["result"]["epochs_done"] == done
        assert out["result"]["finished"] is (done == EPOCHS)
        produced = Path(out["result"]["checkpoint"])
        checkpoint = root / f"store{index}" / f"job-epoch{done}.ckpt"
        checkpoint.parent.mkdir()
        shutil.move(produced, checkpoint)  # another folder, another name
    return checkpoint, epochs


def exact_weights(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    saved = torch.load(path, map_location="cpu", weights_only=False)["yoloq"]
    return {"model": saved["model"], "ema": saved["ema"]}


@pytest.fixture(scope="module")
def reference(job: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = run_cli(job, tmp_path_factory.mktemp("one-go") / "run", EPOCHS)
    assert out["result"]["finished"] and out["result"]["epochs_done"] == EPOCHS
    return Path(out["result"]["checkpoint"]), out["epochs"]


@pytest.mark.parametrize("sizes", [
    pytest.param([1, 1, 1, 1], id="1+1+1+1"),
    pytest.param([2, 1, 1], id="2+1+1"),
])
def test_segments_match_one_go_bit_for_bit(job, reference, tmp_path, sizes):
    ref_checkpoint, ref_epochs = reference
    final, epochs = train_in_segments(job, tmp_path, sizes)

    expected, actual = exact_weights(ref_checkpoint), exact_weights(final)
    for part in ("model", "ema"):
        assert expected[part].keys() == actual[part].keys()
        differing = [name for name, tensor in expected[part].items()
                     if not torch.equal(tensor, actual[part][name])]
        assert not differing, f"{part}: {len(differing)} tensors differ, e.g. {differing[:3]}"
    # Every epoch reported exactly once, in order, with the same metrics as in one go.
    assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1))
    assert epochs == ref_epochs

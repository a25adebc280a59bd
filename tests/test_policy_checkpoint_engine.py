"""Checkpoints by cost in the engine (issue 13 item 5): the store upload (`on_checkpoint`)
runs at the stopping boundary and every `checkpoint_every` epochs, and a resume from a
periodic checkpoint is bit-identical to training on without stopping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from yoloq.datasets.synth import synth_dataset

SEGMENT_CLI = Path(__file__).resolve().parent / "segment_cli.py"  # the test-only segment runner

TRAIN_ARGS = {"seed": 3, "plots": False, "close_mosaic": 1, "nbs": 8, "workers": 0}


def _segment(spec: Path, workdir: Path, stop_after: int, every: str, *, resume: Path | None = None,
             stop_at: int | None = None) -> dict:
    result = workdir.with_suffix(".json")
    cmd = [sys.executable, str(SEGMENT_CLI), "--spec", str(spec), "--workdir",
           str(workdir), "--stop-after", str(stop_after), "--result", str(result),
           "--checkpoint-every", every, "--keep", str(workdir.with_suffix(".kept"))]
    cmd += ["--resume-from", str(resume)] if resume else []
    cmd += ["--stop-at", str(stop_at)] if stop_at else []
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(result.read_text())


def _weights(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    saved = torch.load(path, map_location="cpu", weights_only=False)["yoloq"]
    return {"model": saved["model"], "ema": saved["ema"]}


@pytest.mark.training
def test_periodic_checkpoints_skip_epochs_and_stay_exact(tmp_path):
    data = synth_dataset(tmp_path / "data", train=16, val=8, imgsz=64, nc=3, seed=0)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "interval", "team": "engine", "model": "yolov8n.yaml",
                                    "data": str(data), "epochs": 3, "imgsz": 64, "batch": 4,
                                    "train_args": TRAIN_ARGS}))
    # a preemption at epoch 1 checkpoints there although the interval is 5 epochs
    first = _segment(spec, tmp_path / "a", 3, "5", stop_at=1)
    assert first["checkpoints"] == [1] and first["result"]["stopped_early"]
    # every 2 epochs: epoch 2 (periodic) and 3 (the job's end), not epoch 1's neighbours
    second = _segment(spec, tmp_path / "b", 3, "2", resume=tmp_path / "a.kept" / "epoch1.pt")
    assert second["checkpoints"] == [2, 3]
    # a crash after epoch 2 resumes from the periodic checkpoint: same weights at the end
    third = _segment(spec, tmp_path / "c", 3, "auto", resume=tmp_path / "b.kept" / "epoch2.pt")
    assert third["checkpoints"] == [3]
    on, resumed = _weights(tmp_path / "b.kept" / "epoch3.pt"), _weights(tmp_path / "c.kept" / "epoch3.pt")
    for part in ("model", "ema"):
        assert on[part].keys() == resumed[part].keys()
        for key, tensor in on[part].items():
            assert torch.equal(tensor, resumed[part][key]), (part, key)


@pytest.mark.parametrize("value, expected", [
    pytest.param(None, None, id="unset-by-cost"),
    pytest.param("auto", None, id="auto-by-cost"),
    pytest.param("4", 4, id="fixed"),
])
def test_checkpoint_every_setting(monkeypatch, value, expected):
    from yoloq.engine.segment import CHECKPOINT_EVERY_ENV, checkpoint_every_from_env

    if value is None:
        monkeypatch.delenv(CHECKPOINT_EVERY_ENV, raising=False)
    else:
        monkeypatch.setenv(CHECKPOINT_EVERY_ENV, value)
    assert checkpoint_every_from_env() == expected


@pytest.mark.parametrize("value", ["0", "often", "-2"])
def test_bad_checkpoint_every_names_the_setting(monkeypatch, value):
    from yoloq.engine.segment import CHECKPOINT_EVERY_ENV, checkpoint_every_from_env
    from yoloq.base.errors import UserError

    monkeypatch.setenv(CHECKPOINT_EVERY_ENV, value)
    with pytest.raises(UserError, match=CHECKPOINT_EVERY_ENV):
        checkpoint_every_from_env()

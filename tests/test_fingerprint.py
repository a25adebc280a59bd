"""Checkpoint fingerprints without torch, checked against torch.load on real ultralytics checkpoints.

One tiny real training per session (yolov8n.yaml, 3 epochs, 16 synthetic 32-px images, CPU)
gives a resumable `last.pt` (copied after the first epoch), the final stripped `last.pt`, and the
optimizer-step pattern that `classify.pending_boundaries` must reproduce.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from yoloq.analysis import analyse, fingerprint
from yoloq.analysis.classify import exactness, pending_boundaries
from yoloq.base.errors import ModelError
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

EPOCHS, IMAGES, BATCH, NBS = 3, 16, 2, 8  # accumulate 4 over 8 batches per epoch, warmup 2 epochs


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fingerprint")
    data = synth_dataset(root / "ds", train=IMAGES, val=4, imgsz=32, seed=0)
    from ultralytics import YOLO
    from ultralytics.utils import SETTINGS

    SETTINGS.update({k: False for k in ("sync", "mlflow", "tensorboard", "wandb", "comet", "clearml", "dvc",
                                        "neptune", "raytune") if k in SETTINGS})
    resumable, batch_index, steps = root / "resumable.pt", [0], []

    def record_steps(trainer):
        original = trainer.optimizer_step

        def step():
            steps.append(batch_index[0])
            original()

        trainer.optimizer_step = step

    def count_batch(trainer):
        batch_index[0] += 1

    def keep_first_last_pt(trainer):
        if not resumable.exists():
            shutil.copyfile(trainer.last, resumable)

    model = YOLO("yolov8n.yaml")
    model.add_callback("on_train_start", record_steps)
    model.add_callback("on_train_batch_end", count_batch)
    model.add_callback("on_model_save", keep_first_last_pt)
    model.train(data=str(data), epochs=EPOCHS, imgsz=32, batch=BATCH, nbs=NBS, workers=0, device="cpu",
                project=str(root / "runs"), name="fp", exist_ok=True, plots=False, verbose=False, seed=0)
    final = root / "runs" / "fp" / "weights" / "last.pt"
    stripped = root / "stripped.pt"
    from ultralytics.utils.torch_utils import strip_optimizer

    strip_optimizer(resumable, s=str(stripped))
    return {"data": data, "resumable": resumable, "final": final, "stripped": stripped, "steps": steps}


def _torch_view(path: Path) -> dict:
    import torch

    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model = ckpt.get("ema") or ckpt.get("model")
    return {"epoch": ckpt["epoch"], "resumable": ckpt.get("optimizer") is not None and ckpt["epoch"] >= 0,
            "yaml_file": model.yaml["yaml_file"], "scale": model.yaml["scale"], "nc": model.nc,
            "names": tuple(model.names[i] for i in sorted(model.names)), "task": ckpt["train_args"]["task"],
            "version": ckpt["version"], "date": ckpt["date"], "epochs": ckpt["train_args"]["epochs"],
            "imgsz": ckpt["train_args"]["imgsz"]}


@pytest.mark.training
@pytest.mark.parametrize("which, kind", [
    pytest.param("resumable", "resumable", id="resumable-last"),
    pytest.param("final", "final", id="final-last"),
    pytest.param("stripped", "weights", id="strip_optimizer"),  # stripped at epoch 1: not final
])
def test_fingerprint_matches_torch_load(which, kind, trained):
    start = time.perf_counter()
    found = fingerprint(trained[which])
    elapsed_ms = (time.perf_counter() - start) * 1000
    truth = _torch_view(trained[which])
    assert found.kind == kind and found.resumable is truth["resumable"]
    assert found.epoch == truth["epoch"]
    assert (found.family, found.version, found.scale) == ("yolov8", "v8", truth["scale"])
    assert found.model_yaml == truth["yaml_file"] == "yolov8n.yaml"
    assert (found.task, found.nc, found.names) == (truth["task"], truth["nc"], truth["names"])
    assert (found.ultralytics_version, found.date) == (truth["version"], truth["date"])
    assert (found.epochs_planned, found.imgsz) == (truth["epochs"], truth["imgsz"])
    assert found.epochs_done == {"resumable": 1, "final": EPOCHS, "stripped": 1}[which]
    print(f"fingerprint({which}): {elapsed_ms:.1f} ms")


@pytest.mark.training
def test_fingerprint_needs_no_torch(trained):
    script = ("import sys, json\nfrom yoloq.analysis import fingerprint\n"
              "f = fingerprint(sys.argv[1])\n"
              "print(json.dumps({'kind': f.kind, 'torch': 'torch' in sys.modules,"
              " 'ultralytics': 'ultralytics' in sys.modules}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(trained["resumable"])], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"kind": "resumable", "torch": False, "ultralytics": False}


@pytest.mark.training
def test_pending_boundaries_match_ultralytics_steps(trained):
    """The replay of ultralytics' accumulation rule agrees with the steps the real trainer took."""
    batches = IMAGES // BATCH
    real_pending = [e + 1 for e in range(EPOCHS - 1) if (e + 1) * batches - 1 not in trained["steps"]]
    assert len(trained["steps"]) >= EPOCHS  # the recording saw the optimizer steps
    expected = exactness({"nbs": NBS}, BATCH, IMAGES, EPOCHS).pending_boundaries
    assert list(expected) == real_pending == pending_boundaries(batches, EPOCHS, NBS // BATCH, 2 * batches)


@pytest.mark.training
def test_analyse_with_a_checkpoint_as_model(trained, tmp_path):
    raw = {"name": "from-ckpt", "team": "vision", "model": str(trained["resumable"]),
           "data": str(trained["data"]), "epochs": 2, "imgsz": 32, "batch": 4}
    result = analyse(parse_spec(raw, base_dir=tmp_path))
    assert (result.family, result.scale, result.task) == ("yolov8", "n", "detect")
    assert result.fingerprint is not None and result.fingerprint.resumable
    assert result.to_dict()["fingerprint"]["kind"] == "resumable"


def test_unpickling_runs_no_code_from_the_file(tmp_path):
    """A checkpoint whose pickle would call os.system is read without calling it."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os

            return os.system, (f"touch {marker}",)

    buffer = io.BytesIO()
    pickle.dump({"model": Evil(), "epoch": 0, "train_args": {}}, buffer, protocol=2)
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", buffer.getvalue())
    with pytest.raises(ModelError):
        fingerprint(path)  # not a model: rejected, but nothing ran
    assert not marker.exists()

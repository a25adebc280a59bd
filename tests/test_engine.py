"""The segment engine: preemption at an epoch boundary, resume from a moved
checkpoint, metrics once per epoch, the checkpoint file, and the pure parts."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from yoloq.engine import SegmentRequest, SegmentResult, run_segment
from yoloq.engine.accumulation import AccumulationPolicy
from yoloq.engine.checkpoint import (
    atomic_write_bytes,
    read_resume_point,
    restore_results_csv,
)
from yoloq.engine.determinism import clear_mosaic_buffer, epoch_seeds
from yoloq.engine.metrics import DETECTION_EPOCH
from yoloq.base.errors import UserError
from yoloq.domain.spec import JobSpec
from yoloq.datasets.synth import synth_dataset

EPOCHS = 3


@dataclass
class Recorder:
    """Hooks that record every call and stop after `stop_at`."""

    stop_at: int | None = None
    calls: list[tuple] = field(default_factory=list)

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.calls.append(("epoch_end", epoch, metrics))

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        saved = torch.load(path, map_location="cpu", weights_only=False)  # complete and closed
        self.calls.append(("checkpoint", epoch, saved["epoch"], saved.get("yoloq", {}).get("resumable")))

    def should_stop(self, epoch: int) -> bool:
        self.calls.append(("should_stop", epoch))
        return self.stop_at is not None and epoch >= self.stop_at

    def epochs(self) -> list[int]:
        return [c[1] for c in self.calls if c[0] == "epoch_end"]


@dataclass(frozen=True)
class Paused:
    spec: JobSpec
    result: SegmentResult
    hooks: Recorder
    moved: Path


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> JobSpec:
    data = synth_dataset(tmp_path_factory.mktemp("data"), train=8, val=4, imgsz=64, seed=1)
    return JobSpec(name="engine", team="engine", model="yolov8n.yaml", data=str(data),
                   epochs=EPOCHS, imgsz=64, batch=4,
                   train_args={"seed": 0, "plots": False, "close_mosaic": 1, "workers": 0})


@pytest.fixture(scope="module")
def paused(spec: JobSpec, tmp_path_factory: pytest.TempPathFactory) -> Paused:
    """A segment asked for all epochs, preempted by should_stop after epoch 1."""
    root = tmp_path_factory.mktemp("paused")
    hooks = Recorder(stop_at=1)
    result = run_segment(SegmentRequest(spec=spec, workdir=root / "node-a",
                                        stop_after_epoch=EPOCHS), hooks)
    moved = root / "store" / "checkpoint-1.bin"
    moved.parent.mkdir()
    shutil.copy(result.checkpoint, moved)
    return Paused(spec, result, hooks, moved)


@pytest.mark.training
def test_should_stop_ends_at_the_boundary_with_a_resumable_checkpoint(paused):
    result = paused.result
    assert (result.epochs_done, result.finished, result.stopped_early) == (1, False, True)
    assert result.best is None
    assert paused.hooks.calls[0][:2] == ("epoch_end", 1)
    # asked first: a stop makes this boundary's upload happen, whatever the checkpoint interval
    assert paused.hooks.calls[1:] == [("should_stop", 1), ("checkpoint", 1, 0, True)]
    point = read_resume_point(result.checkpoint)
    assert point.epochs_done == 1
    assert point.state["optimizer"]["state"], "the optimizer state must be saved"


@pytest.mark.training
def test_metrics_use_ultralytics_names(paused):
    _, epoch, metrics = paused.hooks.calls[0]
    assert set(DETECTION_EPOCH) <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())


@pytest.mark.training
def test_resume_from_a_moved_checkpoint_continues_at_the_next_epoch(paused, tmp_path):
    hooks = Recorder()
    result = run_segment(SegmentRequest(spec=paused.spec, workdir=tmp_path / "node-b",
                                        stop_after_epoch=EPOCHS, resume_from=paused.moved), hooks)
    assert hooks.epochs() == [2, 3]  # none lost, none repeated, final_eval not counted
    assert (result.epochs_done, result.finished, result.stopped_early) == (EPOCHS, True, False)
    assert result.save_dir == (tmp_path / "node-b").resolve()
    assert result.checkpoint.parent.parent == result.save_dir
    assert result.best is not None and result.best.parent.parent == result.save_dir
    assert result.final_metrics and "metrics/mAP50(B)" in result.final_metrics
    # The last epoch is not a resumable boundary: no should_stop, one final checkpoint,
    # reported before final_eval strips it (a crash in evaluate/export finalises from it).
    assert ("should_stop", EPOCHS) not in hooks.calls
    assert [c for c in hooks.calls if c[0] == "checkpoint"] == [
        ("checkpoint", 2, 1, True), ("checkpoint", EPOCHS, EPOCHS - 1, False)]
    rows = (result.save_dir / "results.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3"]  # history carried over
    assert not list(paused.moved.parent.glob("*.pt")), "nothing written beside the moved file"


@pytest.mark.training
def test_checkpoint_header_is_a_normal_ultralytics_checkpoint(paused):
    from ultralytics.nn.tasks import load_checkpoint

    model, ckpt = load_checkpoint(paused.result.checkpoint)  # ultralytics wants a .pt name
    assert ckpt["epoch"] == 0 and ckpt["train_args"]["epochs"] == EPOCHS
    assert model.yaml["yaml_file"].endswith("yolov8n.yaml")
    header = _header_without_torch(paused.moved)
    assert header["epoch"] == 0
    assert header["train_args"]["imgsz"] == 64


def _header_without_torch(path: Path) -> dict:
    """Read data.pkl with stub classes, as code that must not import torch does."""

    class Stub:
        def __init__(self, *args, **kwargs):
            pass

        def __setstate__(self, state):
            self.__dict__["state"] = state

    class StubUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if module.split(".")[0] in {"torch", "ultralytics", "collections", "numpy"}:
                return Stub
            return super().find_class(module, name)

        def persistent_load(self, pid):
            return None

    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
        return StubUnpickler(archive.open(name)).load()


@pytest.mark.training
def test_refuses_a_checkpoint_from_another_spec(paused, tmp_path):
    other = paused.spec.model_copy(update={"imgsz": 96})
    with pytest.raises(UserError, match="imgsz"):
        run_segment(SegmentRequest(spec=other, workdir=tmp_path, stop_after_epoch=EPOCHS,
                                   resume_from=paused.moved))


@pytest.mark.training
def test_refuses_to_resume_past_the_requested_stop(paused, tmp_path):
    with pytest.raises(UserError, match="already done"):
        run_segment(SegmentRequest(spec=paused.spec, workdir=tmp_path, stop_after_epoch=1,
                                   resume_from=paused.moved))


@pytest.mark.parametrize("stop_after", [pytest.param(0, id="zero"), pytest.param(EPOCHS + 1, id="past-end")])
def test_rejects_stop_outside_the_schedule(spec, tmp_path, stop_after):
    with pytest.raises(UserError, match="stop_after_epoch"):
        run_segment(SegmentRequest(spec=spec, workdir=tmp_path, stop_after_epoch=stop_after))


@pytest.mark.parametrize("change, field", [
    pytest.param({"device": "0,1"}, "device", id="several-gpus"),
])
def test_rejects_what_cannot_resume_exactly(spec, tmp_path, change, field):
    job = spec.model_copy(update={"model": change.get("spec_model", spec.model)})
    request = SegmentRequest(spec=job, workdir=tmp_path, stop_after_epoch=1,
                             device=change.get("device", "cpu"))
    with pytest.raises(UserError) as caught:
        run_segment(request)
    assert caught.value.field == field


@pytest.mark.parametrize("content, problem", [
    pytest.param(None, "not found", id="missing"),
    pytest.param(b"half a checkpo", "not a readable checkpoint", id="torn"),
])
def test_rejects_unusable_checkpoints(tmp_path, content, problem):
    path = tmp_path / "last.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=problem):
        read_resume_point(path)


def test_rejects_a_plain_ultralytics_checkpoint(tmp_path):
    path = tmp_path / "plain.pt"
    torch.save({"epoch": 3, "model": None, "train_args": {}}, path)
    with pytest.raises(UserError, match="no yoloq resume state"):
        read_resume_point(path)


# --- pure parts -------------------------------------------------------------------

def test_epoch_seeds_are_a_function_of_seed_and_epoch():
    assert epoch_seeds(0, 5) == epoch_seeds(0, 5)
    seen = {epoch_seeds(seed, epoch) for seed in range(3) for epoch in range(20)}
    assert len(seen) == 60
    values = [v for s in seen for v in (s.python, s.numpy, s.torch, s.loader)]
    assert all(0 <= v < 2**32 for v in values)


@pytest.mark.parametrize("policy, epoch, steps", [
    pytest.param(AccumulationPolicy(1, 0, 4), 0, [0, 1, 2, 3], id="no-accumulation"),
    pytest.param(AccumulationPolicy(2, 0, 4), 0, [1, 3], id="two-per-step"),
    pytest.param(AccumulationPolicy(3, 0, 4), 1, [2, 3], id="flush-at-epoch-end"),
    pytest.param(AccumulationPolicy(4, 0, 3), 0, [2], id="fewer-batches-than-nominal"),
    pytest.param(AccumulationPolicy(4, 8, 4), 0, [0, 1, 3], id="warmup-ramp"),
])
def test_accumulation_never_spans_an_epoch(policy, epoch, steps):
    taken, pending = [], 0
    for batch in range(policy.batches_per_epoch):
        pending += 1
        if policy.should_step(epoch, batch, pending):
            taken.append(batch)
            pending = 0
    assert taken == steps
    assert pending == 0


def test_warmup_target_matches_ultralytics_expression():
    import numpy as np

    policy = AccumulationPolicy(nominal=16, warmup_iterations=37, batches_per_epoch=10)
    for ni in range(60):
        expected = max(1, int(np.interp(ni, [0, 37], [1, 16]).round())) if ni <= 37 else 16
        assert policy.target(ni) == expected


def test_atomic_write_replaces_whole_files(tmp_path):
    path = tmp_path / "weights" / "last.pt"
    atomic_write_bytes(path, b"first")
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert os.listdir(path.parent) == ["last.pt"]
    assert stat.S_IMODE(path.stat().st_mode) & 0o044, "readable like a normal file"


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "last.pt"
    atomic_write_bytes(path, b"good")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["last.pt"]


def test_clear_mosaic_buffer_forgets_buffered_images():
    dataset = SimpleNamespace(cache=None, buffer=[2, 0], ims=["a", None, "c"],
                              im_hw0=[1, None, 3], im_hw=[1, None, 3])
    clear_mosaic_buffer(dataset)
    assert dataset.buffer == [] and dataset.ims == [None, None, None]


def test_clear_mosaic_buffer_keeps_a_ram_cache():
    dataset = SimpleNamespace(cache="ram", buffer=[1], ims=["a", "b"])
    clear_mosaic_buffer(dataset)
    assert dataset.buffer == [1] and dataset.ims == ["a", "b"]


def test_results_csv_is_restored_once(tmp_path):
    csv_path = tmp_path / "results.csv"
    restore_results_csv(csv_path, {"epoch": [1, 2], "train/box_loss": [2.5, 0.000123456789]})
    assert csv_path.read_text() == "epoch,train/box_loss\n1,2.5\n2,0.000123457\n"
    restore_results_csv(csv_path, {"epoch": [9]})
    assert csv_path.read_text().startswith("epoch,train/box_loss\n1,")

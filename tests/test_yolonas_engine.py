"""The YOLO-NAS engine: segments through `yoloq.engine.run_segment` (the runner in its own
environment, a fresh process per segment), a preemption asked through the hooks, exact resume
compared tensor by tensor, the checkpoint's fingerprint, evaluation and verified exports.

The engine's environment must be installed (`yoloq engine install yolo-nas`; `make test` and
CI do it): without it these tests fail, naming the command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from yoloq.domain.spec import JobSpec
from yoloq.engine import SegmentRequest, run_segment
from yoloq.engine.environments import YOLO_NAS

pytestmark = pytest.mark.training


@pytest.fixture(scope="module", autouse=True)
def installed():
    if not YOLO_NAS.installed():
        pytest.fail(f"the YOLO-NAS engine is not installed ({YOLO_NAS.root}): run `yoloq engine install yolo-nas`")


class Recorder:
    """Segment hooks that record what the engine reports and stop where told."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at, self.started, self.ended, self.saved, self.asked = stop_at, [], [], [], []

    def on_epoch_start(self, epoch: int) -> None:
        self.started.append(epoch)

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.ended.append((epoch, metrics))

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        self.saved.append((epoch, Path(path)))

    def should_stop(self, epoch: int) -> bool:
        self.asked.append(epoch)
        return epoch == self.stop_at


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(tmp_path_factory.mktemp("nas-data"), train=8, val=4, imgsz=64, seed=0)


def spec(data: Path, epochs: int = 2, **train_args) -> JobSpec:
    return JobSpec(name="nas", team="vision", model="yolo_nas_s", data=str(data), epochs=epochs, imgsz=64,
                   batch=4, train_args={"seed": 0, "warmup_epochs": 1, **train_args})


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory) -> dict:
    """2 epochs in one segment; and 2 epochs as a segment preempted after epoch 1 (through
    `should_stop`, while asked to go on to 2) plus a segment resumed in a fresh process."""
    root = tmp_path_factory.mktemp("nas-runs")
    whole_hooks = Recorder()
    whole = run_segment(SegmentRequest(spec=spec(data), workdir=root / "whole", stop_after_epoch=2,
                                       checkpoint_every=1), whole_hooks)
    first_hooks = Recorder(stop_at=1)
    first = run_segment(SegmentRequest(spec=spec(data), workdir=root / "a", stop_after_epoch=2), first_hooks)
    second_hooks = Recorder()
    second = run_segment(SegmentRequest(spec=spec(data), workdir=root / "b", stop_after_epoch=2,
                                        resume_from=first.checkpoint, expect_epochs_done=1), second_hooks)
    return {"whole": (whole, whole_hooks), "first": (first, first_hooks), "second": (second, second_hooks)}


def test_a_preempted_and_resumed_job_equals_an_uninterrupted_one_tensor_by_tensor(runs):
    import torch

    whole, _ = runs["whole"]
    second, _ = runs["second"]
    a = torch.load(whole.checkpoint, map_location="cpu", weights_only=True)
    b = torch.load(second.checkpoint, map_location="cpu", weights_only=True)
    tensors = 0
    for key in ("net", "ema_net"):
        assert a[key].keys() == b[key].keys()
        for name, tensor in a[key].items():
            tensors += 1
            assert torch.equal(tensor, b[key][name]), f"{key}.{name} differs after the resume"
    assert tensors > 1000
    assert a["epoch"] == b["epoch"] == 2 and a["yoloq"]["resumable"] is False


def test_the_preemption_stops_at_the_boundary_it_was_asked_at(runs):
    first, hooks = runs["first"]
    assert (first.epochs_done, first.finished, first.stopped_early) == (1, False, True)
    assert hooks.asked == [1] and hooks.started == [1]
    assert [e for e, _ in hooks.saved] == [1] and hooks.saved[0][1] == first.checkpoint
    second, resumed = runs["second"]
    assert (second.epochs_done, second.finished, second.stopped_early) == (2, True, False)
    assert resumed.started == [2] and [e for e, _ in resumed.ended] == [2]
    assert [e for e, _ in resumed.saved] == [2]  # the finished checkpoint, reported after the runner ended


def test_metrics_use_the_detection_names_and_match_across_the_resume(runs):
    _, whole = runs["whole"]
    _, first = runs["first"]
    _, second = runs["second"]
    metrics = dict(whole.ended)
    assert {"metrics/mAP50(B)", "metrics/mAP50-95(B)", "train/loss"} <= set(metrics[1])
    assert metrics[1]["train/loss"] == dict(first.ended)[1]["train/loss"]
    assert metrics[2]["train/loss"] == dict(second.ended)[2]["train/loss"]
    assert [e for e, _ in whole.saved] == [1, 2]  # checkpoint_every=1: each epoch uploaded


def test_the_checkpoint_is_bound_to_the_yolonas_engine(runs):
    from yoloq.analysis.fingerprint import fingerprint
    from yoloq.analysis.models import engine_of_model

    first, _ = runs["first"]
    whole, _ = runs["whole"]
    mid = fingerprint(first.checkpoint)
    assert (mid.family, mid.engine, mid.task, mid.scale, mid.kind) == ("yolo-nas", "yolo-nas", "detect", "s", "resumable")
    assert (mid.epochs_done, mid.epochs_planned, mid.nc, mid.imgsz) == (1, 2, 3, 64)
    assert fingerprint(whole.checkpoint).kind == "final"
    assert engine_of_model(str(whole.checkpoint)) == "yolo-nas"


def test_evaluate_and_export_verify_each_format(runs, data, tmp_path):
    import shutil

    from yoloq.engine.evaluate import evaluate
    from yoloq.engine.export import export

    whole, _ = runs["whole"]
    result = evaluate(whole.best or whole.checkpoint, data, imgsz=64, batch=4, workdir=tmp_path / "eval")
    assert result.split == "val"
    assert {"metrics/mAP50(B)", "metrics/mAP50-95(B)", "metrics/precision(B)"} <= set(result.metrics)
    assert all(0.0 <= result.metrics[k] <= 1.0 for k in ("metrics/mAP50(B)", "metrics/mAP50-95(B)"))
    weights = tmp_path / "w" / "best.pt"
    weights.parent.mkdir()
    shutil.copyfile(whole.checkpoint, weights)
    exported = export(weights, ["onnx", "torchscript"], tmp_path / "exports", data, imgsz=64)
    assert [m.format for m in exported] == ["onnx", "torchscript"]
    for model in exported:
        assert model.path.is_file() and model.size > 1_000_000
        assert model.max_output_diff < 1e-3, model


def test_a_train_arg_the_engine_does_not_take_is_refused_before_any_run(data, tmp_path):
    from yoloq.base.errors import UserError
    from yoloq.engine.yolonas.segment import runner_request

    with pytest.raises(UserError, match="train_args.mosaic: is not a YOLO-NAS training argument"):
        runner_request(SegmentRequest(spec=spec(data, mosaic=0.5), workdir=tmp_path, stop_after_epoch=1))


def test_fine_tuning_starts_from_a_finished_jobs_weights(runs, data, tmp_path):
    whole, whole_hooks = runs["whole"]
    tuned_spec = spec(data, epochs=1).model_copy(update={"model": str(whole.checkpoint)})
    hooks = Recorder()
    tuned = run_segment(SegmentRequest(spec=tuned_spec, workdir=tmp_path / "tuned", stop_after_epoch=1), hooks)
    assert tuned.finished and tuned.epochs_done == 1
    scratch_loss = dict(whole_hooks.ended)[1]["train/loss"]
    assert dict(hooks.ended)[1]["train/loss"] != scratch_loss, "the same loss as from scratch: weights ignored"
    from yoloq.analysis.fingerprint import fingerprint

    assert fingerprint(tuned.checkpoint).model_yaml == "yolo_nas_s"


def test_the_engine_runs_this_environments_torch_linked_not_copied():
    """torch, torchvision and the CUDA libraries are linked (about 5.5 GB not copied); numpy is
    the engine's own 1.23.5."""
    import subprocess

    import torch

    from yoloq.engine.environments import engine_env

    done = subprocess.run([str(YOLO_NAS.python), "-c",
                           "import os, torch, numpy; print(os.path.realpath(torch.__file__)); "
                           "print(torch.__version__); print(numpy.__version__)"],
                          capture_output=True, text=True, env=engine_env(), check=True)
    torch_file, version, numpy_version = done.stdout.split()
    assert Path(torch_file) == Path(torch.__file__).resolve()
    assert version == torch.__version__
    assert numpy_version == "1.23.5"
    assert not (YOLO_NAS.site_packages / "torch").exists()
    size = sum(f.stat().st_size for f in YOLO_NAS.root.rglob("*") if f.is_file() and not f.is_symlink())
    assert size < 2 * 2**30, f"the engine environment holds {size / 2**30:.1f} GB: is torch copied?"

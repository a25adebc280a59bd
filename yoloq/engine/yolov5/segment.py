"""Run one yolov5 training segment: epochs [done, stop_after_epoch) of an E-epoch job.

yolov5's `train()` runs with the full job's `epochs`, so its LR schedule and warmup
are the job's. A segment that resumes passes its checkpoint as yolov5's resume
weights; the patched `smart_resume` then loads the exact fp32 state instead of the
fp16 copy. At each epoch start every RNG (Python, numpy, torch, the loader's
generator) is reseeded from (seed, epoch). After each epoch's checkpoint the
segment asks its hooks; a stop ends `train()` right there, by an exception raised
from the `on_model_save` callback (yolov5 has no other way out of its loop at an
epoch boundary), which also skips yolov5's end-of-training strip of `last.pt`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from yoloq.engine import rng_isolation
from yoloq.engine.determinism import apply_seeds, epoch_seeds
from yoloq.engine.segment import NoHooks, SegmentRequest, SegmentResult
from yoloq.engine.yolov5 import environment, exactness, options, state
from yoloq.base.errors import UserError

LOG = logging.getLogger("yoloq.engine.yolov5")  # not warnings: yolov5 ignores every UserWarning
_METRICS = ("train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/precision(B)",
            "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)", "val/box_loss",
            "val/obj_loss", "val/cls_loss", "lr/pg0", "lr/pg1", "lr/pg2")


class _Pause(Exception):
    """Raised from on_model_save to leave yolov5's epoch loop at a boundary."""


@dataclass
class _Run:
    """yoloq's state for one segment, fed by yolov5's callbacks."""

    request: SegmentRequest
    hooks: Any
    captured: environment.Captured
    opt: Any = None
    epoch: int = 0  # the 0-based epoch about to start
    resumed_at: int | None = None  # the epoch this segment resumed at
    stopped_early: bool = False
    paused: bool = False

    def on_train_epoch_start(self) -> None:
        """Every epoch starts from RNG streams and a loader pass derived from (seed, epoch) alone.

        yolov5's InfiniteDataLoader keeps one iterator for the whole run; at an epoch
        boundary it still holds the old pass, whose end draws one more permutation from
        the generator. A fresh iterator, made after reseeding, draws the same order in
        an uninterrupted run as in a resumed one (and reseeds any worker processes).
        """
        loader = self.captured.train_loader
        if self.resumed_at == self.epoch:
            self._warn_if_inexact(len(loader))
        apply_seeds(epoch_seeds(self.request.spec.seed, self.epoch), loader.generator)
        loader.iterator = loader._get_iterator()

    def _warn_if_inexact(self, batches_per_epoch: int) -> None:
        problem = exactness.boundary_problem(self.epoch, self.request.spec.batch, batches_per_epoch,
                                             float(self.opt.hyp.get("warmup_epochs", 3.0)))
        if problem:
            LOG.warning("yolov5 engine: %s", problem)

    def on_train_epoch_end(self, epoch: int) -> None:
        self.epoch = epoch + 1

    def on_fit_epoch_end(self, log_vals: list[Any], epoch: int, best_fitness: Any, fi: Any) -> None:
        metrics = {name: _scalar(value) for name, value in zip(_METRICS, log_vals)}
        self.hooks.on_epoch_end(epoch + 1, metrics)

    def on_model_save(self, last: Path, epoch: int, final_epoch: bool, best_fitness: Any, fi: Any) -> None:
        done = epoch + 1
        stopper = self.captured.stopper
        finishing = done >= self.request.spec.epochs or epoch - stopper.best_epoch >= stopper.patience
        state.save(Path(last), self.captured, self.opt, self.request.spec, epoch, _scalar(best_fitness),
                   resumable=not finishing, best=Path(last).with_name("best.pt"))
        if finishing:
            return  # train() strips last.pt and validates best.pt; reported after it returns
        self.hooks.on_checkpoint(done, Path(last))
        at_target = done >= self.request.stop_after_epoch
        if at_target or self.hooks.should_stop(done):
            self.stopped_early = not at_target
            self.paused = True
            raise _Pause

    def on_resume(self, point: Any) -> Any:
        def smart_resume(ckpt: Any, optimizer: Any, ema: Any, weights: Any, epochs: int, resume: Any):
            best_fitness, start = state.restore(point, self.captured)
            self.epoch = self.resumed_at = start
            return best_fitness, start, epochs

        return smart_resume


def run_segment(request: SegmentRequest, hooks: Any = None) -> SegmentResult:
    """Train one yolov5 segment in this process and return where its outputs are."""
    hooks = hooks or NoHooks()
    environment.apply()
    rng_isolation.isolate()  # other threads' draws must not shift the augmentations
    _check_request(request)
    save_dir = Path(request.workdir).resolve()
    point = state.load(request.resume_from, request.spec, request.stop_after_epoch) \
        if request.resume_from else None
    run = _Run(request, hooks, environment.Captured())
    if point is not None:
        state.restore_outputs(point, save_dir)
        run.captured.on_resume = run.on_resume(point)
        run.captured.stopper_state = dict(point.state.get("stopper") or {})
    hyp, run.opt = options.build(request.spec, _data_yaml(request.spec.data, save_dir), save_dir,
                                 *_weights_and_cfg(request), resume=point is not None)
    _train(run, hyp, request)
    last = save_dir / "weights" / "last.pt"
    best = save_dir / "weights" / "best.pt"
    if not run.paused:
        hooks.on_checkpoint(run.epoch, last)
    return SegmentResult(epochs_done=run.epoch, finished=not run.paused, stopped_early=run.stopped_early,
                         checkpoint=last, best=best if not run.paused and best.exists() else None,
                         save_dir=save_dir)


def _train(run: _Run, hyp: dict[str, Any], request: SegmentRequest) -> None:
    import torch
    from yolov5.utils.callbacks import Callbacks

    callbacks = Callbacks()
    for hook in ("on_train_epoch_start", "on_train_epoch_end", "on_fit_epoch_end", "on_model_save"):
        callbacks.register_action(hook, name="yoloq", callback=getattr(run, hook))
    device = torch.device("cpu" if request.device == "cpu" else f"cuda:{request.device}")
    amp = bool(request.spec.train_args.get("amp", True))
    with environment.patched(run.captured, amp) as train:
        try:
            train.train(hyp, run.opt, device, callbacks)
        except _Pause:
            pass


def _scalar(value: Any) -> float:
    """yolov5 passes fitness as a 1-element array and losses as 0-d tensors."""
    import numpy as np

    return float(np.asarray(value.cpu() if hasattr(value, "cpu") else value, dtype=float).reshape(-1)[0])


def _check_request(request: SegmentRequest) -> None:
    epochs = request.spec.epochs
    if not 1 <= request.stop_after_epoch <= epochs:
        raise UserError("stop_after_epoch", f"{request.stop_after_epoch} is outside 1..{epochs}",
                        f"use a value between 1 and the job's {epochs} epochs")
    if "," in str(request.device):
        raise UserError("device", f"{request.device!r} asks for several GPUs",
                        "give a segment one device: yoloq resumes single-device training only")


def _weights_and_cfg(request: SegmentRequest) -> tuple[str, str]:
    """(weights, cfg) as yolov5 takes them: resume weights, pretrained weights, or a YAML."""
    model = str(request.spec.model)
    cfg = "" if model.endswith(".pt") else str(Path(model).expanduser().resolve())
    if request.resume_from is not None:
        return str(Path(request.resume_from).resolve()), cfg
    return (str(Path(model).resolve()), "") if model.endswith(".pt") else ("", cfg)


def _data_yaml(data: str, save_dir: Path) -> Path:
    """The data YAML with an absolute `path` (yolov5 resolves a relative one from its own package)."""
    from yoloq.analysis.dataset import load_data_yaml, resolve_root

    source = Path(data).expanduser().resolve()
    content = load_data_yaml(source)
    content["path"] = str(resolve_root(content, source))
    save_dir.mkdir(parents=True, exist_ok=True)
    target = save_dir / "data.yaml"
    target.write_text(yaml.safe_dump(content, sort_keys=False))
    return target

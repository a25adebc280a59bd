"""Run one training segment: epochs [done, stop_after_epoch) of an E-epoch job.

The LR schedule, warmup and epoch counter are the full job's; a segment is not
a fresh shorter training. Only the segment that completes the job (its last
epoch, or early stopping) runs ultralytics' final evaluation; every other one
ends right after an epoch's validation and checkpoint, leaving a resumable file.

Checkpoints by cost: every epoch writes the exact local `last.pt`, but the
hooks' `on_checkpoint` (the store upload, the costly part) runs only at the
boundary where the segment stops (its target, or a preemption), and otherwise
every `checkpoint_every` epochs. With `checkpoint_every=None` the segment
measures its own epoch time and its first upload's time and asks
`work_pools.policy.checkpoints.checkpoint_interval` (at most 2% overhead, a crash
loses at most `max_crash_loss_s`). `YOLOQ_CHECKPOINT_EVERY` sets the default:
"auto" (by cost, the default) or a number of epochs. Exactness holds at any
interval: every uploaded file is an exact epoch boundary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from yoloq.base import offline
from yoloq.engine import rng_isolation
from yoloq.base.errors import ResumeMismatch, UserError
from yoloq.domain.spec import JobSpec
from yoloq.settings import settings

# Arguments a segment always sets, whatever the spec's train_args say.
_FORCED = {"resume": False, "save": True, "exist_ok": True, "save_period": -1}
# Spec fields that must match the checkpoint being resumed.
_MUST_MATCH = ("model", "epochs", "imgsz", "batch", "seed")
CHECKPOINT_EVERY_ENV = "YOLOQ_CHECKPOINT_EVERY"


def checkpoint_every_from_env() -> int | None:
    """`YOLOQ_CHECKPOINT_EVERY`: "auto" or unset -> None (by cost), or a positive number."""
    value = settings().checkpoint_every
    return None if value == "auto" else value


@dataclass(frozen=True)
class SegmentRequest:
    spec: JobSpec
    workdir: Path  # node-local scratch: ultralytics' save_dir
    stop_after_epoch: int  # train until this many epochs are done in total (<= spec.epochs)
    resume_from: Path | None = None  # a previous segment's checkpoint (may have moved), or None
    device: str = "cpu"  # "cpu" or "0" (the worker sets CUDA_VISIBLE_DEVICES)
    # The epochs the caller knows are done (its store's metadata): the file in `resume_from`
    # must hold exactly that many, and None/0 means "start fresh" only when it is 0.
    expect_epochs_done: int | None = None
    # Upload a checkpoint every this many epochs besides the stopping boundary; None: by cost.
    checkpoint_every: int | None = field(default_factory=checkpoint_every_from_env)
    max_crash_loss_s: float = 600.0  # the crash-loss bound of the by-cost interval
    # Soft preemption: the scheduler changed the batch at this boundary on purpose (the
    # checkpoint's batch may differ; gradient accumulation keeps the effective batch).
    rebatch: bool = False


class SegmentHooks(Protocol):
    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        """`epoch` is the 1-based count of epochs done; metrics as in results.csv."""

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        """After that epoch's checkpoint is written and closed."""

    def should_stop(self, epoch: int) -> bool:
        """Asked after each resumable checkpoint: True ends the segment there (preemption)."""

    # Optional: `on_epoch_start(epoch)` (1-based epoch about to train), when a hooks object
    # defines it: the epoch ledger's start time.


class NoHooks:
    """The default: report nothing, never stop early."""

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        return None

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        return None

    def should_stop(self, epoch: int) -> bool:
        return False


@dataclass(frozen=True)
class SegmentResult:
    epochs_done: int  # in total, across all segments so far
    finished: bool  # the job is complete (last epoch, or ultralytics' early stopping)
    stopped_early: bool  # should_stop ended it before stop_after_epoch
    checkpoint: Path  # last.pt: resumable unless finished (then stripped by final_eval)
    best: Path | None  # best.pt when finished (for evaluate/export), else None
    save_dir: Path  # results.csv (whole job so far) and plots
    final_metrics: dict[str, float] | None = field(default=None)  # best.pt's final validation


@dataclass
class _SegmentRun:
    """yoloq's per-segment state, kept out of the trainer; fed by its callbacks."""

    request: SegmentRequest
    hooks: Any
    last_reported: int = 0
    stopped_early: bool = False
    final_reported: bool = False
    final_metrics: dict[str, float] | None = None
    every: int | None = None  # the checkpoint interval once known
    epoch_started: float = 0.0
    checkpoint_s: float | None = None  # the first upload's duration (by cost)

    def __post_init__(self) -> None:
        self.every = self.request.checkpoint_every  # None: fixed by the first upload's cost

    def on_train_epoch_start(self, trainer: Any) -> None:
        self.epoch_started = time.monotonic()
        start = getattr(self.hooks, "on_epoch_start", None)
        if start is not None:
            start(trainer.epoch + 1)

    def on_fit_epoch_end(self, trainer: Any) -> None:
        from yoloq.engine.metrics import epoch_metrics

        if trainer.final_evaluating:  # final_eval fires this once more: not a new epoch
            self.final_metrics = {k: float(v) for k, v in (trainer.metrics or {}).items()}
            return
        done = trainer.epoch + 1
        if done <= self.last_reported:  # a NaN-recovery redo reports its epoch once
            return
        self.last_reported = done
        self.hooks.on_epoch_end(done, epoch_metrics(trainer))
        if trainer.stop:  # the job ends here: last.pt is complete and not resumable; report it
            self.final_reported = True  # before final_eval strips it, with best.pt inside, so
            self.hooks.on_checkpoint(done, trainer.last)  # a crash later can still finalise
            return
        epoch_s = time.monotonic() - self.epoch_started
        at_target = done >= self.request.stop_after_epoch
        stopping = at_target or self.hooks.should_stop(done)
        if stopping or self.every is None or done % self.every == 0:
            self._checkpoint(done, trainer.last, epoch_s)
        if stopping:
            self.stopped_early = not at_target
            trainer.pause_requested = True
            trainer.stop = True


    def _checkpoint(self, done: int, path: Any, epoch_s: float) -> None:
        """Upload through the hooks; the first upload fixes the interval (by cost unless the
        request gives one)."""
        started = time.monotonic()
        self.hooks.on_checkpoint(done, path)
        if self.every is None:
            self.every = self._by_cost(epoch_s, time.monotonic() - started)

    def _by_cost(self, epoch_s: float, checkpoint_s: float) -> int:
        from work_pools.policy.checkpoints import checkpoint_interval

        self.checkpoint_s = checkpoint_s
        plan = checkpoint_interval(max(epoch_s, 1e-3), checkpoint_s,
                                   max_loss_s=self.request.max_crash_loss_s)
        return plan.every_epochs


def run_ultralytics_segment(request: SegmentRequest, hooks: SegmentHooks | None = None) -> SegmentResult:
    """Train one segment of an ultralytics model in this process and return where its outputs
    are (`yoloq.engine.run_segment` picks this engine or yolov5's by the model's family)."""
    hooks = hooks or NoHooks()
    offline.apply()
    rng_isolation.isolate()  # other threads' draws must not shift the augmentations
    point = _resume_point(request)
    from yoloq.engine.trainer import trainer_class  # imports ultralytics

    _quiet_ultralytics()
    trainer = trainer_class(request.spec.model)(overrides=train_overrides(request),
                                                resume_point=point)
    run = _SegmentRun(request, hooks)
    trainer.add_callback("on_train_epoch_start", run.on_train_epoch_start)
    trainer.add_callback("on_fit_epoch_end", run.on_fit_epoch_end)
    trainer.train()
    finished = not trainer.pause_requested
    epochs_done = trainer.epoch + 1
    if finished and not run.final_reported:
        hooks.on_checkpoint(epochs_done, trainer.last)
    return SegmentResult(
        epochs_done=epochs_done, finished=finished, stopped_early=run.stopped_early,
        checkpoint=Path(trainer.last),
        best=Path(trainer.best) if finished and Path(trainer.best).exists() else None,
        save_dir=Path(trainer.save_dir), final_metrics=run.final_metrics)


def _quiet_ultralytics() -> None:
    """offline.quiet_ultralytics(), tolerating settings this ultralytics version lacks."""
    try:
        offline.quiet_ultralytics()
    except KeyError:  # e.g. no "hub" setting in ultralytics 8.4
        from ultralytics.utils import SETTINGS

        wanted = {k: False for k in ("sync", "mlflow", "clearml", "comet", "dvc", "hub",
                                     "neptune", "raytune", "tensorboard", "wandb") if k in SETTINGS}
        if any(SETTINGS.get(k) is not False for k in wanted):
            SETTINGS.update(wanted)


def train_overrides(request: SegmentRequest) -> dict[str, Any]:
    """ultralytics arguments for this segment: the spec's, placed in `workdir`."""
    spec = request.spec
    args: dict[str, Any] = {"deterministic": True, **spec.train_args}
    args.update(model=spec.model, data=spec.data, epochs=spec.epochs, imgsz=spec.imgsz,
                batch=spec.batch, seed=spec.seed, name=spec.name, device=request.device,
                save_dir=str(Path(request.workdir).resolve()), **_FORCED)
    return args


def _resume_point(request: SegmentRequest) -> Any:
    """Validate the request; load and check the checkpoint it resumes from, if any."""
    epochs = request.spec.epochs
    if not 1 <= request.stop_after_epoch <= epochs:
        raise UserError("stop_after_epoch", f"{request.stop_after_epoch} is outside 1..{epochs}",
                        f"use a value between 1 and the job's {epochs} epochs")
    if "," in str(request.device):
        raise UserError("device", f"{request.device!r} asks for several GPUs",
                        "give a segment one device: ultralytics runs multi-GPU training in "
                        "child processes that yoloq cannot resume exactly")
    if request.resume_from is None:
        if request.expect_epochs_done:
            raise ResumeMismatch(f"no checkpoint to resume from, but {request.expect_epochs_done} "
                                 "epochs are done; not training from scratch")
        return None
    from yoloq.engine.checkpoint import read_resume_point

    point = read_resume_point(request.resume_from, epochs)
    extending = epochs > int(point.train_args.get("epochs") or 0)
    if request.expect_epochs_done is not None and point.epochs_done != request.expect_epochs_done:
        raise ResumeMismatch(f"{request.resume_from} holds {point.epochs_done} epochs done, the "
                             f"store's metadata says {request.expect_epochs_done}; not training")
    if point.epochs_done >= request.stop_after_epoch:
        raise UserError("stop_after_epoch",
                        f"{request.stop_after_epoch} epochs are already done in {point.path}",
                        f"ask for more than {point.epochs_done}")
    expected = train_overrides(request)
    for key in _MUST_MATCH:
        if key == "batch" and request.rebatch:
            continue
        if key == "epochs" and extending:  # `yoloq extend` raised the total: the schedule
            continue  # from here on is the new total's (docs/concepts/extend.md)
        saved = point.train_args.get(key)
        if _comparable(key, saved) != _comparable(key, expected[key]):
            raise UserError(f"spec.{key}", f"checkpoint was trained with {key}={saved!r}, "
                            f"the spec says {expected[key]!r}",
                            "resume with the job's original spec")
    return point


def _comparable(key: str, value: Any) -> str:
    """Model paths differ between nodes; their file names must not."""
    return Path(str(value)).name if key == "model" else str(value)

"""A narrow subclass of ultralytics' task trainers for exact, resumable segments.

Each override exists for one reason (see DESIGN.md, "Segments and resume"):

- `_begin_epoch` (a callback) and `_close_dataloader_mosaic`: every epoch starts
  from RNG streams, loader and mosaic buffer derived from (seed, epoch) alone.
- `_build_train_pipeline` / `optimizer_step`: accumulation never spans an epoch
  boundary (AccumulationPolicy).
- `save_model`: one atomic file with the exact fp32 state beside the header.
- `resume_training`: continue from that state, not from ultralytics' fp16 copy.
- `final_eval`: skipped when the segment pauses, since it strips `last.pt`.

yoloq's own bookkeeping (hooks, metrics, the stop decision) lives outside, in
`yoloq.engine.segment`; the trainer only exposes `pause_requested`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ultralytics.models.yolo.classify import ClassificationTrainer
from ultralytics.models.yolo.depth import DepthTrainer
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.models.yolo.obb import OBBTrainer
from ultralytics.models.yolo.pose import PoseTrainer
from ultralytics.models.yolo.segment import SegmentationTrainer
from ultralytics.models.yolo.semantic import SemanticSegmentationTrainer
from ultralytics.utils.torch_utils import unwrap_model

from yoloq.engine import checkpoint
from yoloq.engine.accumulation import AccumulationPolicy
from yoloq.engine.determinism import apply_seeds, clear_mosaic_buffer, epoch_seeds
from yoloq.base.errors import UserError


class ExactResumeMixin:
    """Mixed in front of an ultralytics task trainer (DetectionTrainer and friends)."""

    def __init__(self, *args: Any, resume_point: checkpoint.ResumePoint | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resume_point = resume_point
        self.pause_requested = False  # set by the segment: end after this epoch, resumably
        self.final_evaluating = False
        self._best_bytes: bytes | None = None
        self._accumulation: AccumulationPolicy | None = None
        self._batch_index = 0
        self._pending = 0
        self.add_callback("on_train_epoch_start", _begin_epoch)

    # --- determinism -----------------------------------------------------------------
    def reseed_epoch(self) -> None:
        apply_seeds(epoch_seeds(self.args.seed, self.epoch), self.train_loader.generator)

    def _close_dataloader_mosaic(self) -> None:
        super()._close_dataloader_mosaic()
        self.reseed_epoch()  # closing may draw from the RNGs; only some runs close at this epoch

    # --- accumulation ----------------------------------------------------------------
    def _build_train_pipeline(self) -> None:
        super()._build_train_pipeline()
        nb = len(self.train_loader)
        self._accumulation = AccumulationPolicy(
            nominal=self.accumulate, warmup_iterations=self._get_warmup_iterations(nb),
            batches_per_epoch=nb)
        self.accumulate = 1  # the loop now calls optimizer_step on every batch; we decide

    def optimizer_step(self) -> None:
        self._pending += 1
        step = self._accumulation.should_step(self.epoch, self._batch_index, self._pending)
        self._batch_index += 1
        if step:
            super().optimizer_step()
            self._pending = 0

    # --- checkpoints -----------------------------------------------------------------
    def save_model(self) -> bool:
        """Write last.pt (and best.pt when fitness improved) atomically, with the exact state."""
        finishing = bool(self.stop)  # last epoch, early stopping or time limit: final_eval follows
        head = checkpoint.header(self)
        if self.best_fitness == self.fitness:
            self._best_bytes = checkpoint.serialize(head)
            checkpoint.atomic_write_bytes(self.best, self._best_bytes)
        state = checkpoint.exact_state(self, resumable=not finishing, best_bytes=self._best_bytes)
        checkpoint.atomic_write_bytes(self.last, checkpoint.serialize({**head, checkpoint.KEY: state}))
        return True

    def resume_training(self, ckpt: dict | None) -> None:
        """Continue from `resume_point`; ultralytics' own `ckpt` (fp16, lossy) is not used."""
        point = self.resume_point
        if point is None:
            return
        state, head = point.state, point.header
        unwrap_model(self.model).load_state_dict(state["model"])
        self.ema.ema.load_state_dict(state["ema"])
        self.ema.updates = state["ema_updates"]
        for saved, group in zip(state["optimizer"]["param_groups"], self.optimizer.param_groups):
            saved["fused"] = group.get("fused")  # the device picks the kernel, not the file
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.best_fitness = head.get("best_fitness")
        self.stopper.__dict__.update(head.get("stopper") or {})
        self.metrics.update({k: v for k, v in (head.get("train_metrics") or {}).items()
                             if k in self.metrics})
        self.start_epoch = point.epochs_done
        self._restore_outputs(head, checkpoint.best_bytes(state))
        self._resume_criterion()

    def _restore_outputs(self, head: dict[str, Any], best: bytes | None) -> None:
        """Carry best.pt and results.csv into this segment's (possibly new) folder."""
        if best is not None:
            self._best_bytes = best
            checkpoint.atomic_write_bytes(self.best, best)
        checkpoint.restore_results_csv(self.csv, head.get("train_results"))

    def _resume_criterion(self) -> None:
        """As ultralytics' resume_training: end-to-end heads keep a per-epoch loss schedule."""
        model = unwrap_model(self.model)
        head = getattr(model, "student_model", model).model[-1]
        if getattr(head, "one2one_cv2", None) is not None:
            model.criterion = model.init_criterion()
            model.criterion.updates = self.start_epoch - 1
            model.criterion.update()

    def final_eval(self) -> None:
        if self.pause_requested:
            return  # it would strip last.pt; a paused segment must stay resumable
        self.final_evaluating = True
        try:
            super().final_eval()
        finally:
            self.final_evaluating = False


def _begin_epoch(trainer: ExactResumeMixin) -> None:
    """on_train_epoch_start: the same starting state whether or not this process ran the last epoch."""
    trainer.reseed_epoch()
    trainer.train_loader.reset()  # next iteration draws its order from the reseeded generator
    clear_mosaic_buffer(trainer.train_loader.dataset)
    trainer._batch_index = 0
    trainer._pending = 0


class ExactDetectionTrainer(ExactResumeMixin, DetectionTrainer):
    pass


class ExactSegmentationTrainer(ExactResumeMixin, SegmentationTrainer):
    pass


class ExactPoseTrainer(ExactResumeMixin, PoseTrainer):
    pass


class ExactOBBTrainer(ExactResumeMixin, OBBTrainer):
    pass


class ExactClassificationTrainer(ExactResumeMixin, ClassificationTrainer):
    pass


class ExactSemanticSegmentationTrainer(ExactResumeMixin, SemanticSegmentationTrainer):
    pass


class ExactDepthTrainer(ExactResumeMixin, DepthTrainer):
    pass


TRAINERS: dict[str, type[ExactResumeMixin]] = {
    "detect": ExactDetectionTrainer,
    "segment": ExactSegmentationTrainer,
    "pose": ExactPoseTrainer,
    "obb": ExactOBBTrainer,
    "classify": ExactClassificationTrainer,
    "semantic": ExactSemanticSegmentationTrainer,
    "depth": ExactDepthTrainer,
}


def trainer_class(model: str | Path) -> type[ExactResumeMixin]:
    """The trainer for a model YAML or .pt (its task decides)."""
    from ultralytics.nn.tasks import guess_model_task, yaml_model_load

    name = str(model)
    task = guess_model_task(yaml_model_load(name) if name.endswith((".yaml", ".yml")) else name)
    if task not in TRAINERS:
        raise UserError("model", f"{name} is a {task!r} model; segments train "
                        f"{', '.join(TRAINERS)} models", "use a detection model YAML such as yolov8n.yaml")
    return TRAINERS[task]

"""`analyse`: everything that happens to a job spec before it queues. Never imports torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from yoloq import gpus
from yoloq.analysis import classify, estimates
from yoloq.analysis.dataset import DatasetInfo, validate_dataset
from yoloq.analysis.fingerprint import Fingerprint, fingerprint
from yoloq.analysis.models import ModelInfo, check_supported, model_size, resolve_model_name
from yoloq.errors import ModelError, SpecError
from yoloq.segments import segment_epochs_for
from yoloq.spec import JobSpec, load_spec


@dataclass(frozen=True)
class Analysis:
    """The verdict on a job spec: what it trains, on what, how big, how long, where it queues."""

    name: str
    team: str
    tier: str
    queue: str
    model: str
    family: str
    version: str
    scale: str
    task: str
    params_m: float
    gflops: float
    data: str  # the data YAML, absolute
    dataset_root: str
    nc: int
    names: tuple[str, ...]
    train_images: int
    val_images: int
    test_images: int
    epochs: int
    imgsz: int
    batch: int
    amp: bool
    gpu: str  # the GPU type the figures below are for
    est_gpu_mem_gb: float
    max_batch: int
    fits: bool
    images_per_s: float
    est_epoch_s: float
    est_duration_s: float
    reference_gpu: str
    est_duration_reference_s: float
    job_class: str  # short | full
    segment_epochs: int
    accumulate: int
    batches_per_epoch: int
    accumulation_pending_boundaries: int  # where stock ultralytics would hold unapplied gradients
    exact_resume: bool
    exact_resume_reason: str | None
    warnings: tuple[str, ...]
    fingerprint: Fingerprint | None
    dataset: DatasetInfo | None = None  # kept for callers (resolved_data()); not in to_dict()

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("fingerprint", "dataset")}
        out["names"] = list(self.names)
        out["warnings"] = list(self.warnings)
        out["fingerprint"] = self.fingerprint.to_dict() if self.fingerprint else None
        return out


def analyse_file(path: str | Path, gpu: str | None = None) -> Analysis:
    return analyse(load_spec(path), gpu=gpu)


def analyse(spec: JobSpec, gpu: str | None = None) -> Analysis:
    """Validate the spec, its dataset and model; estimate memory and time; classify the job."""
    target = _gpu(gpu)
    model, print_ = _model(spec)
    dataset = validate_dataset(spec.data)
    warnings = list(dataset.warnings) + _model_warnings(model, print_, dataset)
    amp = _bool_arg(spec, "amp", True)
    train, val = dataset.images("train"), dataset.images("val")
    memory = estimates.estimate_memory(model.params_m, model.gflops, spec.imgsz, spec.batch, target, amp)
    timing = estimates.estimate_time(model.scale, spec.imgsz, spec.epochs, train, val, target)
    reference = estimates.estimate_time(model.scale, spec.imgsz, spec.epochs, train, val, gpus.REFERENCE)
    if not memory.fits:
        warnings.append(f"batch: {spec.batch} needs about {memory.est_gpu_mem_gb:.1f} GB, more than a "
                        f"{target.name} offers; at most {memory.max_batch} fits there")
    exact = classify.exactness(spec.train_args, spec.batch, train, spec.epochs)
    if exact.reason:
        warnings.append(f"exact_resume: {exact.reason}")
    if exact.accumulation_warning:
        warnings.append(f"batch: {exact.accumulation_warning}")
    return Analysis(
        name=spec.name, team=spec.team, tier=spec.tier.label, queue=spec.tier.queue, model=spec.model,
        family=model.family, version=model.version, scale=model.scale, task=model.task,
        params_m=model.params_m, gflops=model.gflops, data=dataset.yaml_path, dataset_root=dataset.root,
        nc=dataset.nc, names=dataset.names, train_images=train, val_images=val,
        test_images=dataset.images("test"), epochs=spec.epochs, imgsz=spec.imgsz, batch=spec.batch, amp=amp,
        gpu=target.name, est_gpu_mem_gb=memory.est_gpu_mem_gb, max_batch=memory.max_batch, fits=memory.fits,
        images_per_s=timing.images_per_s, est_epoch_s=timing.est_epoch_s, est_duration_s=timing.est_duration_s,
        reference_gpu=gpus.REFERENCE.name, est_duration_reference_s=reference.est_duration_s,
        job_class=classify.job_class(reference.est_duration_s, spec.epochs),
        segment_epochs=spec.segment_epochs or segment_epochs_for(spec.epochs, timing.est_epoch_s),
        accumulate=exact.accumulate, batches_per_epoch=exact.batches_per_epoch,
        accumulation_pending_boundaries=len(exact.pending_boundaries),
        exact_resume=exact.exact_resume, exact_resume_reason=exact.reason,
        warnings=tuple(warnings), fingerprint=print_, dataset=dataset,
    )


def _gpu(name: str | None) -> gpus.GpuType:
    if name is None:
        return gpus.REFERENCE
    try:
        return gpus.lookup(name)
    except KeyError:
        raise SpecError("gpu", f"unknown GPU type {name!r}",
                        f"use one of: {', '.join(gpus.CATALOG)}") from None


def _model(spec: JobSpec) -> tuple[ModelInfo, Fingerprint | None]:
    if not spec.model.lower().endswith(".pt"):
        return resolve_model_name(spec.model), None
    print_ = fingerprint(spec.model)
    name = Path(spec.model).name
    check_supported("model", name, print_.family or "unknown", print_.task, "")
    if not print_.scale:
        raise ModelError("model", f"{name}: cannot tell the model scale from {print_.model_yaml!r}",
                         "give a checkpoint trained from a YOLO model YAML such as yolov8n.yaml")
    params_m, gflops = model_size(print_.family, print_.scale)
    info = ModelInfo(name=name, family=print_.family, version=print_.version, scale=print_.scale,
                     task=print_.task, variant="", params_m=params_m, gflops=gflops, yaml_path="")
    return info, print_


def _model_warnings(model: ModelInfo, print_: Fingerprint | None, dataset: DatasetInfo) -> list[str]:
    warnings = []
    if model.variant:
        warnings.append(f"model: estimates use the plain {model.family}{model.scale} figures for the "
                        f"{model.variant} variant")
    if print_ is not None and print_.names and print_.names != dataset.names:
        warnings.append(f"model: the checkpoint's {print_.nc} classes differ from the dataset's {dataset.nc}; "
                        "ultralytics re-initialises the head for the dataset's classes")
    return warnings


def _bool_arg(spec: JobSpec, key: str, default: bool) -> bool:
    value = spec.train_args.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"train_args.{key}", f"must be true or false, not {value!r}", f"write `{key}: true`")
    return value

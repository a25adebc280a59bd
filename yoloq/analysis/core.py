"""`analyse`: everything that happens to a job spec before it queues. Never imports torch."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from yoloq.domain import gpus
from yoloq.analysis import classify, estimates, train_args
from yoloq.analysis.dataset import DatasetInfo, validate_local_dataset
from yoloq.domain.tasks import TASKS, task as task_row

# The model-name suffixes of the tasks other than detection (yolov8n-seg.yaml -> "-seg"): their
# cost is in the task table's factors, not a variant's.
TASK_SUFFIXES = tuple("-" + row.example.rsplit(".", 1)[0].split("-", 1)[1] for row in TASKS.values()
                      if "-" in row.example)
from yoloq.analysis.fingerprint import Fingerprint, fingerprint
from yoloq.analysis.models import (
    ModelInfo,
    check_supported,
    model_size,
    resolve_model_name,
    yolonas_exactness,
    yolov5_exactness,
)
from yoloq.analysis.families import YOLO_NAS
from yoloq.base.errors import DatasetError, ModelError, SpecError
from yoloq.domain.segments import segment_epochs_for
from yoloq.domain.spec import WEIGHTS_DIR_ENV, JobSpec, load_spec
from yoloq.settings import settings


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
    weights: str  # the .pt training starts from ("" when none)
    trains_from_scratch: bool  # no pretrained weights: random initialisation
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


def analyse(spec: JobSpec, gpu: str | None = None, *,
            validate: Callable[..., DatasetInfo] | None = None) -> Analysis:
    """Validate the spec, its dataset and model; estimate memory and time; classify the job.

    `validate(data, task=...)` checks the dataset for the model's task: local folders by
    default; admission passes `yoloq.datasets.validate.validate_dataset`, which reads `s3://`
    datasets too."""
    if validate is None:
        if str(spec.data).startswith("s3://"):
            raise DatasetError("data", f"{spec.data} is in S3 and this analysis reads local folders",
                               "analyse it through `yoloq analyse` or the REST API")
        validate = validate_local_dataset
    target = _gpu(gpu)
    model, print_ = _model(spec)
    weights = _weights(spec)
    dataset = validate(spec.data, task=model.task)
    _check_classes(spec, dataset)
    warnings = list(dataset.warnings) + _model_warnings(model, print_, dataset) + train_args.advice(spec.train_args)
    amp = amp_enabled(spec.train_args)
    train, val = dataset.images("train"), dataset.images("val")
    cost = task_row(model.task)  # a head's memory and time relative to detection
    memory = estimates.estimate_memory(model.params_m, model.gflops * cost.mem_factor, spec.imgsz, spec.batch,
                                       target, amp)
    timing = estimates.estimate_time(model.scale, spec.imgsz, spec.epochs, train, val, target, cost.time_factor)
    reference = estimates.estimate_time(model.scale, spec.imgsz, spec.epochs, train, val, gpus.REFERENCE,
                                        cost.time_factor)
    if not memory.fits:
        warnings.append(_memory_warning(spec, model, memory, target, amp))
    if model.engine == YOLO_NAS:
        problem = train_args.yolonas_problem(spec.train_args)
        if problem:
            raise SpecError(*problem)
    rule = {"yolov5": yolov5_exactness, YOLO_NAS: yolonas_exactness}.get(model.engine, classify.exactness)
    exact = rule(spec.train_args, spec.batch, train, spec.epochs)
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
        weights=weights, trains_from_scratch=not weights, warnings=tuple(warnings), fingerprint=print_, dataset=dataset,
    )


def _gpu(name: str | None) -> gpus.GpuType:
    if name is None:
        return gpus.REFERENCE
    try:
        return gpus.lookup(name)
    except gpus.UnknownGpu as exc:
        raise SpecError("gpu", f"unknown GPU type {name!r}", exc.hint) from None


def _model(spec: JobSpec) -> tuple[ModelInfo, Fingerprint | None]:
    if not spec.model.lower().endswith(".pt"):
        return resolve_model_name(spec.model), None
    require_weights("model", spec.model)
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
    if model.variant and model.variant not in TASK_SUFFIXES:  # a task's own cost is in the estimate
        warnings.append(f"model: estimates use the plain {model.family}{model.scale} figures for the "
                        f"{model.variant} variant")
    if print_ is not None and print_.family == YOLO_NAS and print_.names != dataset.names:
        raise ModelError("model", f"{Path(print_.path).name} was trained on {print_.nc} classes {list(print_.names)}, "
                         f"the dataset has {dataset.nc} {list(dataset.names)}; the YOLO-NAS engine fine-tunes "
                         "on the same classes only", "fine-tune on a dataset with the same class names, or train "
                         "from scratch with `model: yolo_nas_s`")
    if print_ is not None and print_.names and print_.names != dataset.names:
        warnings.append(f"model: the checkpoint's {print_.nc} classes differ from the dataset's {dataset.nc}; "
                        "ultralytics re-initialises the head for the dataset's classes")
    return warnings


def amp_enabled(args: dict[str, Any]) -> bool:
    """Mixed precision on? `amp` is true/false or fp16/bf16/fp32 (checked by train_args)."""
    value = args.get("amp", True)
    return value if isinstance(value, bool) else str(value).lower() != "fp32"


def require_weights(field: str, path: str) -> None:
    """A weights file must exist here: nothing is ever downloaded."""
    if os.path.isfile(path):
        return
    name = Path(path).name
    folder = settings().weights_dir
    where = f"nor in {WEIGHTS_DIR_ENV}={folder}" if folder else f"and {WEIGHTS_DIR_ENV} is not set"
    raise ModelError(field, f"checkpoint not found: {path} ({where}); nothing is downloaded, yoloq runs offline",
                     f"put {name} there or in a folder named by {WEIGHTS_DIR_ENV}, or train from scratch "
                     f"with `model: {scratch_yaml(name)}`")


def scratch_yaml(weights_name: str) -> str:
    """The shipped model YAML that trains the architecture of `weights_name` from scratch
    (`yolo11s.pt` -> `yolo11s.yaml`), or `yolov8n.yaml` when the name is no shipped model
    (`myweights.pt`: there is no `myweights.yaml`)."""
    from yoloq.analysis.models import _find_yaml
    from yoloq.analysis.families import parse_model_name

    candidate = Path(weights_name).name.removesuffix(".pt") + ".yaml"
    parsed = parse_model_name(candidate)
    return candidate if parsed is not None and _find_yaml(candidate, parsed) is not None else "yolov8n.yaml"


def _weights(spec: JobSpec) -> str:
    """The .pt training starts from: the model checkpoint, else `pretrained: x.pt`, else ""."""
    if spec.model.lower().endswith(".pt"):
        return spec.model
    pretrained = spec.train_args.get("pretrained")
    if isinstance(pretrained, str):
        require_weights("train_args.pretrained", pretrained)
        return pretrained
    return ""


def _check_classes(spec: JobSpec, dataset: DatasetInfo) -> None:
    wanted = spec.train_args.get("classes")
    ids = wanted if isinstance(wanted, list) else [] if wanted is None else [wanted]
    for cls in ids:
        if cls >= dataset.nc:
            raise SpecError("train_args.classes", f"class {cls} does not exist (the dataset has {dataset.nc})",
                            f"use class ids 0-{dataset.nc - 1}")


def _memory_warning(spec: JobSpec, model: ModelInfo, memory: estimates.MemoryEstimate, target: gpus.GpuType,
                    amp: bool) -> str:
    text = (f"batch: {spec.batch} needs about {memory.est_gpu_mem_gb:.1f} GB, more than a {target.name} offers; "
            f"at most {memory.max_batch} fits there")
    anywhere = max(gpus.CATALOG.values(), key=lambda g: g.mem_gb)
    if estimates.max_batch(model.params_m, model.gflops, spec.imgsz, anywhere, amp) < spec.batch:
        text += f"; it fits no GPU type yoloq knows (the largest, {anywhere.name}, takes at most " \
                f"{estimates.max_batch(model.params_m, model.gflops, spec.imgsz, anywhere, amp)})"
    return text

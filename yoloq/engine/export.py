"""Export best weights (TorchScript by default, ONNX with the `onnx` extra) and prove
each exported file works by loading it back and running validation on it.

Nothing is ever installed at run time: a missing `onnx` package is a UserError
raised before any work starts.
"""

from __future__ import annotations

import importlib.util
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from yoloq.base.errors import UserError
from yoloq.engine.evaluate import is_yolonas_weights, is_yolov5_weights, load_yolo, metrics_of
from yoloq.engine.model_results import (ExportedModel, ExportVerificationError, output_difference,
                                        validation_folder)
from yoloq.domain.spec import EXPORT_FORMATS

DEFAULT_FORMATS = ("torchscript",)



def export(weights: Path, formats: list[str], dest_dir: Path, data: Path, imgsz: int,
           device: str = "cpu") -> list[ExportedModel]:
    """Export `weights` into `dest_dir` in each format, verifying every file."""
    chosen = _check_formats(formats)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    source = _copy_into(Path(weights), dest_dir)
    if is_yolonas_weights(source):  # YOLO-NAS: exported and verified in the engine's environment
        from yoloq.engine.yolonas.finalise import export as export_yolonas
        return export_yolonas(source, chosen, Path(data), imgsz)
    if is_yolov5_weights(source):  # original YOLOv5: exported and verified with the yolov5 package
        from yoloq.engine.yolov5.finalise import export as export_yolov5
        return export_yolov5(source, chosen, Path(data), imgsz, device)
    return [_export_one(source, fmt, data, imgsz, device) for fmt in chosen]


def _check_formats(formats: list[str]) -> list[str]:
    """Normalise the list and fail early on what cannot work here."""
    chosen = list(dict.fromkeys(f.strip().lower() for f in formats)) or list(DEFAULT_FORMATS)
    unknown = [f for f in chosen if f not in EXPORT_FORMATS]
    if unknown:
        raise UserError("export", f"unknown format {unknown[0]!r}",
                        f"use one of: {', '.join(EXPORT_FORMATS)}")
    if "onnx" in chosen and not _importable("onnx"):
        raise UserError("export", "ONNX export needs the onnx package", "pip install 'yoloq[onnx]'")
    return chosen


def _importable(module: str) -> bool:
    """True when `import module` works (honours a `sys.modules[name] = None` block)."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _copy_into(weights: Path, dest_dir: Path) -> Path:
    """ultralytics writes exports beside the weights: put a copy in dest_dir first."""
    target = dest_dir / weights.name
    if weights.resolve() != target.resolve():
        shutil.copyfile(weights, target)
    return target


def _export_one(weights: Path, fmt: str, data: Path, imgsz: int, device: str) -> ExportedModel:
    options: dict[str, Any] = {}
    if fmt == "onnx":  # simplifying needs onnxslim; without it ultralytics would try to install it
        options["simplify"] = importlib.util.find_spec("onnxslim") is not None
    with _quiet_export_warnings():
        model = load_yolo(weights)
        path = Path(model.export(format=fmt, imgsz=imgsz, device=device, **options))
        metrics, verified_by = _verify(path, fmt, data, imgsz, device, model.task)
        difference = _output_difference(weights, path, imgsz, device, model.task)
    return ExportedModel(format=fmt, path=path, size=path.stat().st_size, verification=metrics,
                         verified_by=verified_by, max_output_diff=difference)


def _verify(path: Path, fmt: str, data: Path, imgsz: int, device: str,
            task: str) -> tuple[dict[str, float], str]:
    """Load the exported file with ultralytics and validate it on the val split, as `task`
    (an exported file does not say its task; ultralytics would guess from the file name).

    ONNX runs through onnxruntime when installed, else through OpenCV's DNN
    module (a dependency of ultralytics), after `onnx.checker` accepts the graph.
    """
    how = f"ultralytics val ({fmt})"
    options: dict[str, Any] = {}
    if fmt == "onnx":
        _check_onnx_graph(path)
        if importlib.util.find_spec("onnxruntime") is None:
            options["dnn"] = True
            how = "onnx.checker + ultralytics val (onnx via OpenCV DNN)"
        else:
            how = "onnx.checker + ultralytics val (onnx via onnxruntime)"
    with validation_folder(path, "yoloq-verify-") as project:
        results = load_yolo(path, task=task).val(
            data=str(data), imgsz=imgsz, batch=1, device=device, workers=0,
            project=project, name=fmt, plots=False, verbose=False, **options)
    metrics = metrics_of(results)
    if not metrics:
        raise ExportVerificationError(f"{path.name}: validation returned no metrics")
    return metrics, how


def _output_difference(weights: Path, exported: Path, imgsz: int, device: str, task: str = "detect") -> float:
    """Feed one fixed input to the PyTorch weights and the exported file; compare raw outputs."""
    import torch
    from ultralytics.nn.autobackend import AutoBackend
    from ultralytics.utils.torch_utils import select_device

    torch_device = select_device(device, verbose=False)
    dnn = exported.suffix == ".onnx" and importlib.util.find_spec("onnxruntime") is None
    image = torch.rand(1, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(0)).to(torch_device)
    outputs = []
    for path, options in ((weights, {}), (exported, {"dnn": dnn})):
        backend = AutoBackend(str(path), device=torch_device, fp16=False, verbose=False, **options)
        outputs.append(_predictions(backend(image)).float().cpu())
    reference, candidate = outputs
    if task in _UPSAMPLED_EXPORTS:
        reference = _as_dense_export(reference, candidate, align_corners=_UPSAMPLED_EXPORTS[task])
    return output_difference(exported, reference, candidate)


# Dense heads return stride-8 (semantic) or stride-4 (depth) maps in PyTorch and upsample them to
# the input in export mode, with these `align_corners` (ultralytics' SemanticSegment and Depth heads).
_UPSAMPLED_EXPORTS = {"semantic": False, "depth": True}


def _as_dense_export(raw: Any, exported: Any, align_corners: bool) -> Any:
    """PyTorch's dense output in the form its export returns it: upsampled to the input
    (bilinear, as the head does in export mode); a semantic ONNX export also bakes in the class
    map (argmax), so the reference does too."""
    import torch.nn.functional as F

    if raw.ndim != 4 or exported.ndim not in (3, 4) or raw.shape[-2:] == exported.shape[-2:]:
        return raw
    upsampled = F.interpolate(raw, size=tuple(exported.shape[-2:]), mode="bilinear", align_corners=align_corners)
    if exported.ndim == 4:
        return upsampled
    return (upsampled.argmax(1) if upsampled.shape[1] > 1 else upsampled.squeeze(1) > 0).float()


def _predictions(output: Any) -> Any:
    """The first tensor of a model's output: detection's predictions, or the predictions that a
    segmentation, pose or OBB model returns beside its extra outputs (mask prototypes, raw maps;
    PyTorch and an exported file nest those differently)."""
    import torch

    while isinstance(output, (list, tuple)):
        if not output:
            raise ExportVerificationError("the model returned an empty output")
        output = output[0]
    return torch.as_tensor(output)


def _check_onnx_graph(path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as error:
        raise ExportVerificationError(f"{path.name}: onnx.checker refused the graph: {error}") from error


@contextmanager
def _quiet_export_warnings() -> Iterator[None]:
    """torch's tracing and deprecation notices are noise for users: the exports work."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated",
                                category=FutureWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                module=r"ultralytics\.utils\.export")
        yield

"""Evaluate and export an original YOLOv5 model with the yolov5 package's own val and export.

ultralytics cannot load an original YOLOv5 checkpoint, so `yoloq.engine.evaluate.evaluate` and
`yoloq.engine.export.export` hand such weights (the fingerprint's engine is "yolov5") to this
module. It returns the same types as the ultralytics path: an `EvalResult` whose metrics
use ultralytics' names (`metrics/precision(B)`, ..., `fitness`), so MLflow and the Prefect
table artifact see the same keys, and one `ExportedModel` per format, which the pipeline
registers as it does every export.

Everything runs offline inside `offline_patches()` (see `environment` for why each patch).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from yoloq.engine.yolov5 import environment
from yoloq.engine.model_results import (
    EvalResult,
    ExportedModel,
    ExportVerificationError,
    evaluation_split,
    output_difference,
    validation_folder,
)

METRIC_KEYS = ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")
SPEED_KEYS = ("preprocess", "inference", "postprocess")


@contextlib.contextmanager
def offline_patches(per_class: dict[str, Any] | None = None) -> Iterator[Any]:
    """Import `yolov5.val` with every download path replaced by a local-file check.

    `per_class`, when given, receives what `ap_per_class` computed (val keeps it to itself).
    """
    environment.apply()
    from yolov5 import val
    from yolov5.models import common, experimental
    from yolov5.utils import general, metrics

    replacements = {
        (common, "attempt_download_from_hub"): lambda *a, **k: None,
        (experimental, "attempt_download"): environment.local_file,
        (metrics, "compute_ap"): environment.compute_ap,
        (general, "CONFIG_DIR"): Path(os.environ["YOLOV5_CONFIG_DIR"]),
    }
    if per_class is not None:
        replacements[(val, "ap_per_class")] = _capturing_ap(metrics.ap_per_class, per_class)
    saved = {key: getattr(*key) for key in replacements}
    try:
        for (module, name), value in replacements.items():
            setattr(module, name, value)
        yield val
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def _capturing_ap(function: Any, sink: dict[str, Any]) -> Any:
    def wrapper(tp: Any, conf: Any, pred_cls: Any, target_cls: Any, *args: Any, **kwargs: Any) -> Any:
        result = function(tp, conf, pred_cls, target_cls, *args, **kwargs)
        sink.update(result=result, target_cls=target_cls, names=kwargs.get("names") or {})
        return result

    return wrapper


def evaluate(weights: Path, data: Path, imgsz: int, batch: int, device: str = "cpu",
             workdir: Path | None = None, *, workers: int = 2) -> EvalResult:
    """yolov5's own validation of `weights` on the test split (or val)."""
    split = evaluation_split(Path(data))
    project = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="yoloq-eval-v5-"))
    captured: dict[str, Any] = {}
    results, times, save_dir = _validate(weights, data, imgsz, batch, device, project, "eval",
                                         split, workers, captured)
    return EvalResult(split=split, metrics=metrics_dict(results), per_class=per_class_rows(captured),
                      speed_ms=dict(zip(SPEED_KEYS, map(float, times))), save_dir=save_dir)


def _validate(weights: Path, data: Path, imgsz: int, batch: int, device: str, project: Path,
              name: str, split: str, workers: int, captured: dict[str, Any] | None = None,
              **options: Any) -> tuple[tuple[float, ...], tuple[float, ...], Path]:
    """(mp, mr, map50, map, losses...), per-image times in ms, and the folder val wrote."""
    from yoloq.engine.yolov5.segment import _data_yaml

    project.mkdir(parents=True, exist_ok=True)
    data_yaml = _data_yaml(str(data), project / f"{name}-data")
    with offline_patches(captured) as val:
        results, _maps, _map50s, times = val.run(
            data=str(data_yaml), weights=str(weights), batch_size=batch, imgsz=imgsz, task=split,
            device=str(device), workers=workers, project=str(project), name=name, exist_ok=True,
            plots=False, verbose=False, **options)
    return tuple(float(x) for x in results), tuple(times), project / name


def metrics_dict(results: tuple[float, ...]) -> dict[str, float]:
    """val.run's (P, R, mAP50, mAP50-95, ...) under ultralytics' names, with its fitness."""
    metrics = dict(zip(METRIC_KEYS, results[:4]))
    metrics["fitness"] = 0.1 * metrics["metrics/mAP50(B)"] + 0.9 * metrics["metrics/mAP50-95(B)"]
    return metrics


def per_class_rows(captured: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per class that had labels, like ultralytics' summary (empty: no detections)."""
    if "result" not in captured:
        return []
    import numpy as np

    _tp, _fp, p, r, _f1, ap, classes = captured["result"]
    instances = np.bincount(np.asarray(captured["target_cls"], dtype=int), minlength=int(max(classes) + 1))
    names = captured["names"]
    return [{"Class": str(names.get(int(c), int(c))), "Instances": int(instances[int(c)]),
             "Box-P": round(float(p[i]), 4), "Box-R": round(float(r[i]), 4),
             "mAP50": round(float(ap[i, 0]), 4), "mAP50-95": round(float(ap[i].mean()), 4)}
            for i, c in enumerate(classes)]


def export(weights: Path, formats: list[str], data: Path, imgsz: int,
           device: str = "cpu") -> list[ExportedModel]:
    """Export `weights` (already in the destination folder) in each checked format, verifying each."""
    return [_export_one(Path(weights), fmt, Path(data), imgsz, device) for fmt in formats]


def _export_one(weights: Path, fmt: str, data: Path, imgsz: int, device: str) -> ExportedModel:
    with offline_patches(), _legacy_onnx_exporter():
        from yolov5 import export as yolov5_export

        files = yolov5_export.run(weights=str(weights), include=(fmt,), imgsz=(imgsz, imgsz),
                                  device=str(device), data=str(data))
    if not files:  # yolov5's export logs a failure and returns nothing
        raise ExportVerificationError(f"{weights.name}: yolov5 export to {fmt} failed (see the log above)")
    path = Path(files[0])
    if fmt == "onnx":
        _check_onnx_graph(path)
    difference = _output_difference(weights, path, data, imgsz, device)
    metrics, how = _verify_by_validation(path, fmt, data, imgsz, device)
    return ExportedModel(format=fmt, path=path, size=path.stat().st_size, verification=metrics,
                         verified_by=how, max_output_diff=difference)


@contextlib.contextmanager
def _legacy_onnx_exporter() -> Iterator[None]:
    """yolov5 calls `torch.onnx.export` without `dynamo`; torch >= 2.9 then defaults to the
    dynamo exporter, which needs onnxscript. The TorchScript-based exporter needs only onnx."""
    import inspect

    import torch.onnx

    original = torch.onnx.export
    if "dynamo" not in inspect.signature(original).parameters:
        yield
        return
    torch.onnx.export = functools.partial(original, dynamo=False)
    try:
        yield
    finally:
        torch.onnx.export = original


def _verify_by_validation(path: Path, fmt: str, data: Path, imgsz: int,
                          device: str) -> tuple[dict[str, float], str]:
    """yolov5 val on the exported file itself (val split, batch 1)."""
    dnn = fmt == "onnx" and importlib.util.find_spec("onnxruntime") is None
    how = f"yolov5 val ({fmt}{' via OpenCV DNN' if dnn else ''}) + one image against PyTorch"
    with validation_folder(path, "yoloq-verify-v5-") as project:
        results, _times, _dir = _validate(path, data, imgsz, 1, device, Path(project), fmt,
                                          "val", 0, dnn=dnn)
    return metrics_dict(results), how


def _output_difference(weights: Path, exported: Path, data: Path, imgsz: int, device: str) -> float:
    """Run one dataset image through the PyTorch weights and the exported file; compare outputs."""
    reference = _pytorch_output(weights, data, imgsz, device)
    return output_difference(exported, reference, _exported_output(exported, one_image(data, imgsz), device))


def one_image(data: Path, imgsz: int) -> Any:
    """The first image of the val split, letterboxed to imgsz x imgsz, as a 1x3xHxW float tensor."""
    import torch
    from yolov5.utils.dataloaders import LoadImages

    from yoloq.analysis.dataset import load_data_yaml, resolve_root

    content = load_data_yaml(Path(data))
    split = content["val"][0] if isinstance(content["val"], list) else content["val"]
    source = resolve_root(content, Path(data)) / split
    _path, image, *_ = next(iter(LoadImages(str(source), img_size=imgsz, auto=False)))
    return torch.from_numpy(image.copy()).float().div(255).unsqueeze(0)


def _pytorch_output(weights: Path, data: Path, imgsz: int, device: str) -> Any:
    import torch

    with offline_patches():
        from yolov5.models.experimental import attempt_load
        from yolov5.utils.torch_utils import select_device

        torch_device = select_device(str(device))
        model = attempt_load(str(weights), device=torch_device, inplace=True, fuse=True).eval()
        with torch.no_grad():
            output = model(one_image(data, imgsz).to(torch_device))
    return (output[0] if isinstance(output, (list, tuple)) else output).float().cpu()


def _exported_output(path: Path, image: Any, device: str) -> Any:
    """The exported file's raw output: torch.jit.load for TorchScript, onnxruntime or OpenCV for ONNX."""
    import torch

    if path.suffix == ".torchscript":
        target = torch.device("cpu" if device == "cpu" else f"cuda:{device}")
        try:
            module = torch.jit.load(str(path), map_location=target)
            with torch.no_grad():
                output = module(image.to(target))
        except Exception as error:  # any failure means "not verified"
            raise ExportVerificationError(f"{path.name}: torch.jit.load/run failed: {error}") from error
        return (output[0] if isinstance(output, (list, tuple)) else output).float().cpu()
    return torch.as_tensor(_onnx_output(path, image.numpy()))


def _onnx_output(path: Path, image: Any) -> Any:
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: image})[0]
    import cv2

    net = cv2.dnn.readNetFromONNX(str(path))
    net.setInput(image)
    return net.forward()


def _check_onnx_graph(path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as error:
        raise ExportVerificationError(f"{path.name}: onnx.checker refused the graph: {error}") from error

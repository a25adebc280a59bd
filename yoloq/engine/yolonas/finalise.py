"""Evaluate and export a finished YOLO-NAS job, through `runner.py` in the engine's environment.

Evaluation is super-gradients' `DetectionMetrics` (mAP at 0.5 and 0.5:0.95, precision and
recall at 0.5) of the EMA weights on the test split (else val), reported under
ultralytics' detection names. Export fuses the QARepVGG blocks and writes ONNX
(`torch.onnx.export`, opset 17: super-gradients' own `model.export` fails with torch 2.14,
see docs/concepts/model-families.md) or TorchScript (`torch.jit.trace`); each file is
loaded back (onnxruntime, `torch.jit.load`) and run on one image of the dataset against
the PyTorch model: raw boxes and scores, without NMS.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from yoloq.engine.model_results import EvalResult, ExportedModel, ExportVerificationError, evaluation_split
from yoloq.engine.yolonas.segment import run_tool

_EVAL_NAMES = {"mAP50": "metrics/mAP50(B)", "mAP50-95": "metrics/mAP50-95(B)",
               "precision50": "metrics/precision(B)", "recall50": "metrics/recall(B)", "fitness": "fitness"}


def evaluate(weights: Path, data: Path, imgsz: int, batch: int, workdir: Path | None = None) -> EvalResult:
    split = evaluation_split(Path(data))
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="yoloq-eval-nas-"))
    request = workdir / "evaluate.json"
    workdir.mkdir(parents=True, exist_ok=True)
    request.write_text(json.dumps({"checkpoint": str(Path(weights).resolve()), "data": str(Path(data).resolve()),
                                   "imgsz": imgsz, "batch": batch, "split": split}))
    event = _one(run_tool(["--evaluate", "--request", str(request)], workdir), "evaluate")
    metrics = {_EVAL_NAMES.get(k, k): float(v) for k, v in event["metrics"].items() if k != "f1_50"}
    rows = [{"metric": name, "value": round(value, 4)} for name, value in metrics.items()]
    return EvalResult(split=split, metrics=metrics, per_class=rows,
                      speed_ms={"total_per_image": 1000 * float(event["seconds"]) / max(1, int(event["images"]))},
                      save_dir=workdir)


def export(weights: Path, formats: list[str], data: Path, imgsz: int) -> list[ExportedModel]:
    """`weights` (already in the destination folder) in each format, each verified."""
    unknown = [f for f in formats if f not in ("onnx", "torchscript")]
    if unknown:
        raise ExportVerificationError(f"YOLO-NAS exports to onnx and torchscript, not {unknown[0]}")
    workdir = Path(weights).parent
    request = workdir / "export.json"
    request.write_text(json.dumps({"checkpoint": str(Path(weights).resolve()), "data": str(Path(data).resolve()),
                                   "imgsz": imgsz, "formats": list(formats)}))
    events = [e for e in run_tool(["--export", "--request", str(request)], workdir) if e.get("event") == "export"]
    exported = []
    for event in events:
        diff = event["max_abs_diff_vs_torch"]
        if not event.get("verified"):
            raise ExportVerificationError(f"{Path(event['path']).name}: its outputs differ from PyTorch's "
                                          f"(boxes {diff['boxes_px']:.3g} px, scores {diff['scores']:.3g})")
        exported.append(ExportedModel(
            format=event["format"], path=Path(event["path"]), size=int(event["bytes"]),
            verification={"max_abs_diff_boxes_px": float(diff["boxes_px"]), "max_abs_diff_scores": float(diff["scores"])},
            verified_by=f"{event['verified_by']} (one image, raw boxes and scores against PyTorch)",
            max_output_diff=max(float(diff["scores"]), float(diff["boxes_px"]) / imgsz)))
    return exported


def _one(events: list[dict], kind: str) -> dict:
    found = [e for e in events if e.get("event") == kind]
    if not found:
        raise ExportVerificationError(f"the YOLO-NAS runner gave no {kind} result")
    return found[0]

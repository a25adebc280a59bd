"""Validate a job's best weights: on the dataset's `test` split when it has one, else `val`.

Returns plain data (metrics under ultralytics' own names, one row per class) that
the flow turns into MLflow metrics and a Prefect table artifact.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from yoloq.base import offline
from yoloq.engine.model_results import EvalResult, evaluation_split
from yoloq.base.paths import state_paths

_ULTRALYTICS_INTEGRATIONS = ("sync", "mlflow", "clearml", "comet", "dvc", "hub", "neptune",
                             "raytune", "tensorboard", "wandb")


def load_yolo(weights: Path, task: str | None = None) -> Any:
    """An ultralytics YOLO model from a local file, with the offline setup applied."""
    offline.apply()
    from ultralytics import YOLO

    quiet_ultralytics()
    return YOLO(str(weights), task=task)


def quiet_ultralytics() -> None:
    """`offline.quiet_ultralytics()`, tolerating settings this ultralytics version lacks."""
    try:
        offline.quiet_ultralytics()
    except KeyError:  # e.g. no 'hub'/'neptune' setting in ultralytics 8.4
        from ultralytics.utils import SETTINGS

        wanted = {k: False for k in _ULTRALYTICS_INTEGRATIONS if k in SETTINGS}
        if any(SETTINGS.get(k) is not False for k in wanted):
            SETTINGS.update(wanted)


def evaluate(weights: Path, data: Path, imgsz: int, batch: int, device: str = "cpu",
             workdir: Path | None = None, *, workers: int = 2) -> EvalResult:
    """Run ultralytics validation of `weights` on the test split (or val)."""
    if is_yolonas_weights(weights):  # YOLO-NAS: super-gradients' metrics, in the engine's environment
        from yoloq.engine.yolonas.finalise import evaluate as evaluate_yolonas
        return evaluate_yolonas(weights, data, imgsz, batch, workdir)
    if is_yolov5_weights(weights):  # original YOLOv5: ultralytics cannot load it; yolov5's own val does
        from yoloq.engine.yolov5.finalise import evaluate as evaluate_yolov5
        return evaluate_yolov5(weights, data, imgsz, batch, device, workdir, workers=workers)
    split = evaluation_split(data)
    project = Path(workdir) if workdir else Path(tempfile.mkdtemp(dir=_scratch(), prefix="eval-"))
    results = load_yolo(weights).val(
        data=str(data), split=split, imgsz=imgsz, batch=batch, device=device, workers=workers,
        project=str(project), name="eval", exist_ok=True, plots=False, verbose=False)
    return EvalResult(split=split, metrics=metrics_of(results), per_class=per_class_rows(results),
                      speed_ms={k: float(v) for k, v in (results.speed or {}).items()},
                      save_dir=Path(results.save_dir))


def is_yolov5_weights(weights: Path) -> bool:
    """True when the fingerprint of `weights` names the yolov5 engine (original YOLOv5)."""
    from yoloq.analysis.models import YOLOV5, engine_of_model

    return engine_of_model(str(weights)) == YOLOV5


def is_yolonas_weights(weights: Path) -> bool:
    """True when `weights` is a checkpoint of yoloq's YOLO-NAS engine."""
    from yoloq.analysis.models import YOLO_NAS, engine_of_model

    return engine_of_model(str(weights)) == YOLO_NAS


def metrics_of(results: Any) -> dict[str, float]:
    """ultralytics' results_dict as plain floats (names as in results.csv)."""
    return {name: float(value) for name, value in results.results_dict.items()}


def per_class_rows(results: Any) -> list[dict[str, Any]]:
    """One row per class with plain Python values, for a Prefect table artifact."""
    return [{key: _plain(value) for key, value in row.items()}
            for row in results.summary(decimals=4)]


def _plain(value: Any) -> Any:
    """numpy scalars -> int/float/str so rows serialise as JSON."""
    if hasattr(value, "item"):
        value = value.item()
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def _scratch() -> Path:
    folder = state_paths().ensure().scratch
    folder.mkdir(parents=True, exist_ok=True)
    return folder

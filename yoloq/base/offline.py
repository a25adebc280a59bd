"""One place that keeps Prefect, MLflow and ultralytics off the network.

`apply()` sets the environment before any of those packages is imported (their
settings are read at import time) and is idempotent. Child processes inherit it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from yoloq.base.paths import StatePaths, state_paths
from yoloq.settings import settings

PREFECT_PORT_DEFAULT = 4210

# Environment that must hold in every yoloq process and its children.
_FIXED_ENV = {
    # Prefect
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_WORKER_PREFETCH_SECONDS": "2",
    # A waiting segment stays Scheduled: the late-runs service would mark every one Late 15 s
    # after it was queued, a state change whose event starts a scheduling pass on every node
    # (and "Late" is wrong for a job waiting its turn).
    "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "true",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    # MLflow
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING": "false",
    # ultralytics
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
    "YOLO_VERBOSE": "False",
    # Hugging Face and friends, in case a dependency looks
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # Keep CPU runs polite on small machines and deterministic
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}


def apply(paths: StatePaths | None = None) -> StatePaths:
    """Set the offline environment for this process (and its children)."""
    paths = (paths or state_paths()).ensure()
    os.environ["YOLOQ_HOME"] = str(paths.root)
    for key, value in _FIXED_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_WORKER_QUERY_SECONDS", str(worker_poll_s()))
    os.environ.setdefault("PREFECT_HOME", str(paths.prefect_home))
    os.environ.setdefault("YOLO_CONFIG_DIR", str(paths.ultralytics))
    os.environ.setdefault("MPLCONFIGDIR", str(paths.root / "matplotlib"))
    _install_font(Path(os.environ["YOLO_CONFIG_DIR"]))
    return paths


def event_wake_enabled() -> bool:
    """Prefect's event stream wakes the scheduling loops unless `YOLOQ_WAKE=poll`."""
    return settings().wake != "poll"


def worker_poll_s() -> int:
    """The node agent's poll. With the event wake it is only the fallback for a missed event:
    5 s, where 1 s cost an idle stack a fifth of a core in API calls (`bench/idle_cpu.py`).
    Without it, the poll is what starts a pass: 1 s."""
    return 5 if event_wake_enabled() else 1


def _install_font(config_dir: Path) -> None:
    """ultralytics fetches Arial.ttf for plots unless a file of that name exists."""
    target = config_dir / "Ultralytics" / "Arial.ttf"
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = _dejavu_font()
    if source is not None:
        shutil.copyfile(source, target)
        shutil.copyfile(source, target.with_name("Arial.Unicode.ttf"))


def _dejavu_font() -> Path | None:
    """matplotlib ships DejaVuSans; find it without importing matplotlib."""
    import importlib.util

    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    font = root / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
    return font if font.exists() else None


def quiet_ultralytics() -> None:
    """Turn ultralytics' own integrations off; yoloq logs to MLflow itself.

    Call after `apply()`, in processes that import ultralytics.
    """
    from ultralytics.utils import SETTINGS

    wanted = {"sync": False, "mlflow": False, "clearml": False, "comet": False, "dvc": False,
              "hub": False, "neptune": False, "raytune": False, "tensorboard": False,
              "wandb": False}
    wanted = {k: v for k, v in wanted.items() if k in SETTINGS}  # keys vary by version
    if any(SETTINGS.get(k) != v for k, v in wanted.items()):
        SETTINGS.update(wanted)

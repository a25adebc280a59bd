"""The project state folder: one place for everything yoloq keeps on disk.

Default `.yoloq/` under the current directory; `YOLOQ_HOME` overrides it. Every
path below derives from it, so `down`/`up` and a moved checkout keep their state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from yoloq.settings import settings

PROJECT_DIR = Path(__file__).resolve().parents[2]
"""The checkout (prefect.yaml, flows/, work_pools/): where `yoloq up` deploys from."""


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    @property
    def ultralytics(self) -> Path:
        return self.root / "ultralytics"

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def scratch(self) -> Path:
        """Node-local working folders for training segments (never shared state)."""
        return self.root / "scratch"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    def ensure(self) -> "StatePaths":
        for path in (self.root, self.prefect_home, self.ultralytics, self.checkpoints,
                     self.scratch, self.exports, self.logs, self.pids, self.mlflow_artifacts):
            path.mkdir(parents=True, exist_ok=True)
        return self


def state_paths(root: str | os.PathLike[str] | None = None) -> StatePaths:
    """Resolve the state folder: explicit argument, then `YOLOQ_HOME`, then `./.yoloq`."""
    chosen = root or settings().home or ".yoloq"
    return StatePaths(Path(chosen).expanduser().resolve())

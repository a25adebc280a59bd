"""Where yoloq logs its MLflow runs: a Prefect Block, so the UI can edit it.

Left empty, it points at the project's own SQLite store (`<state>/mlflow.db`,
artifacts under `<state>/mlartifacts`), which needs no server. The cluster
profile sets an MLflow server's URI instead, reachable from every worker.
"""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field

from yoloq.records.tracking import JobTracker, artifact_location_for, default_tracking_uri


class MlflowLocation(Block):
    """MLflow tracking store, experiment and model registry for yoloq jobs."""

    _block_type_name = "MLflow Location"
    _description = ("Where yoloq logs one MLflow run per job and registers exported models. "
                    "Empty tracking URI: the project's SQLite store in its state folder.")

    tracking_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI (http://host:5000, sqlite:///path.db). "
                    "Empty: sqlite:///<state>/mlflow.db.")
    experiment: str = Field(default="yoloq", description="Experiment that holds the job runs.")
    registry_uri: str | None = Field(
        default=None, description="Model registry URI. Empty: the tracking URI.")

    def resolved_tracking_uri(self) -> str:
        return self.tracking_uri or default_tracking_uri()

    def artifact_location(self) -> str | None:
        """Where new experiments keep artifacts (None: the tracking server decides)."""
        return artifact_location_for(self.resolved_tracking_uri())

    def tracker(self) -> JobTracker:
        return JobTracker(self.resolved_tracking_uri(), self.experiment,
                          registry_uri=self.registry_uri)

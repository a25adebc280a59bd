"""Fault matrix, tracking family: the MLflow server down for 30 s mid-training. Training
goes on; the epochs logged meanwhile are buffered and delivered once the server is back,
each exactly once, and no epoch is lost or trained again (epoch ledger).

Runs the segment flow's training path (`flows.segment._train`) in this process against a
real MLflow server that is killed when epoch 1 is reported and started again 30 s later."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fault_helpers import FaultAfterEpoch, report

pytestmark = [pytest.mark.integration, pytest.mark.training]


class Server:
    def __init__(self, folder: Path) -> None:
        from yoloq.ops.stack import free_port

        self.folder, self.port, self.proc = folder, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from yoloq.ops import mlflow_server

        self.proc = mlflow_server.start(self.port, f"sqlite:///{self.folder / 'mlflow.db'}",
                                        (self.folder / "artifacts").as_uri(),
                                        log_path=str(self.folder / "mlflow.log"))

    def stop(self) -> None:
        from yoloq.ops import mlflow_server

        mlflow_server.stop(self.proc, grace_s=2)


def test_mlflow_down_30s_metrics_buffered_and_delivered_once(tiny_dataset, tmp_path):
    from mlflow.tracking import MlflowClient

    from blocks.checkpoints import LocalCheckpointStore
    from flows.segment import _train, tracking_fails_fast
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch
    from yoloq.domain.spec import parse_spec
    from yoloq.records.tracking import JobTracker

    server = Server(tmp_path)
    server.start()
    try:
        tracking_fails_fast()
        tracker = JobTracker(server.uri, "faults")
        run_id = tracker.run_for_job("mlflow-outage")
        store = LocalCheckpointStore(path=str(tmp_path / "store"))
        spec = parse_spec({"name": "mlflow-outage", "team": "faults", "model": "yolov8n.yaml",
                           "data": str(tiny_dataset), "epochs": 4, "imgsz": 64, "batch": 4,
                           "train_args": {"seed": 0, "workers": 0, "plots": False}})

        def outage() -> None:
            server.stop()
            restart.start()

        restart = threading.Timer(30, server.start)

        logger = FaultAfterEpoch(1, outage)
        summary = _train(spec, "mlflow-outage", 3, {"epochs_done": 0}, tmp_path / "work", store,
                         tracker, run_id, "segment-1", logger)
        assert logger.fired and summary["epochs_done"] == 3
        client = MlflowClient(server.uri)
        for metric in ("train/box_loss", "metrics/mAP50-95B", "lr/pg0"):
            steps = [m.step for m in client.get_metric_history(run_id, metric)]
            assert sorted(steps) == [1, 2, 3], (metric, steps)  # delivered, each once
        counts = trainings_per_epoch(epoch_trainings("mlflow-outage", store))
        assert counts == {1: 1, 2: 1, 3: 1}
    finally:
        restart.cancel() if "restart" in locals() else None
        server.stop()
    report("MLflow server down 30 s", delivered_steps=[1, 2, 3], trainings=counts,
           epochs_retrained=0)

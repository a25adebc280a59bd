"""The names yoloq's processes share on one Prefect server: work pools, deployments, the
store blocks, the server's own route, and the environment the node agent hands a segment process."""

from __future__ import annotations

from yoloq.settings import settings

CHECKPOINT_BLOCK = "yoloq-checkpoints"
MLFLOW_BLOCK = "yoloq-mlflow"
GPU_POOL = "yolo-gpu"
JOBS_POOL = "yoloq-jobs"
JOB_DEPLOYMENT = "yolo-job/yolo-job"
SEGMENT_DEPLOYMENT = "train-segment/train-segment"
REDUCED_BATCH_ENV = "YOLOQ_REDUCED_BATCH"  # set by the worker on a reduced-batch admission
NODE_ENV = "YOLOQ_NODE_NAME"  # this node's name in the epoch ledger (default: the hostname)
SCHEDULED_RUNS_ROUTE = "/yoloq/deployments/{id}/scheduled_runs"  # yoloq's server: many runs at once


def node_name() -> str:
    import socket

    return settings().node_name or socket.gethostname()

"""Where a yoloq process finds its stores: resolved once, from blocks or the environment.

Order: a saved Prefect block (`yoloq-checkpoints`, `yoloq-mlflow`) when the
profile's server has one, else `YOLOQ_CHECKPOINT_URI` / `YOLOQ_MLFLOW_URI`, else
the embedded defaults under the state folder. The cluster profile points both at
shared services so a preempted job can resume on another node.
"""

from __future__ import annotations

import os

from yoloq.paths import state_paths

CHECKPOINT_BLOCK = "yoloq-checkpoints"
MLFLOW_BLOCK = "yoloq-mlflow"
GPU_POOL = "yolo-gpu"
JOBS_POOL = "yoloq-jobs"
JOB_DEPLOYMENT = "yolo-job/yolo-job"
SEGMENT_DEPLOYMENT = "train-segment/train-segment"
PREEMPT_LABEL = "yoloq.preempt"
REDUCED_BATCH_ENV = "YOLOQ_REDUCED_BATCH"  # set by the worker on a reduced-batch admission


def checkpoint_store():
    """The checkpoint store for this process (block, then URI, then local default)."""
    from blocks.checkpoints import CheckpointStore, LocalCheckpointStore, store_from_uri
    from blocks.saved import load_saved

    block = load_saved(CheckpointStore, CHECKPOINT_BLOCK)
    if block is not None:
        return block
    uri = os.environ.get("YOLOQ_CHECKPOINT_URI")
    if uri:
        return store_from_uri(uri)
    return LocalCheckpointStore(path=str(state_paths().checkpoints))


def mlflow_tracking_uri() -> tuple[str, str]:
    """(tracking URI, experiment name)."""
    from blocks.mlflow import MlflowLocation
    from blocks.saved import load_saved

    block = load_saved(MlflowLocation, MLFLOW_BLOCK)
    if block is not None and block.tracking_uri:
        return block.tracking_uri, block.experiment
    uri = os.environ.get("YOLOQ_MLFLOW_URI") or state_paths().mlflow_uri
    return uri, os.environ.get("YOLOQ_MLFLOW_EXPERIMENT", "yoloq")

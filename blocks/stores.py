"""Where a yoloq process finds its stores: resolved once, from blocks or the environment.

Order: a saved Prefect block (`yoloq-checkpoints`, `yoloq-mlflow`) when the
profile's server has one, else `YOLOQ_CHECKPOINT_URI` / `YOLOQ_MLFLOW_URI`, else
the embedded defaults under the state folder. The cluster profile points both at
shared services so a preempted job can resume on another node.

No silent fallback: a saved block that cannot be read raises `StoreUnavailable`
(it never quietly becomes the environment's or the node-local default), and the
cluster profile has no node-local default at all.
"""

from __future__ import annotations

import os

from yoloq.base.errors import StoreUnavailable
from yoloq.base.names import CHECKPOINT_BLOCK, MLFLOW_BLOCK
from yoloq.base.paths import state_paths
from yoloq.settings import settings


def _shared_profile() -> bool:
    return (settings().profile or os.environ.get("PREFECT_PROFILE")) == "cluster"


def checkpoint_store():
    """The checkpoint store for this process (block, then URI, then local default)."""
    from blocks.checkpoints import CheckpointStore, LocalCheckpointStore, store_from_uri

    block = _saved(CheckpointStore, CHECKPOINT_BLOCK, "checkpoint store")
    if block is not None:
        return block
    uri = settings().checkpoint_uri
    if uri:
        return store_from_uri(uri)
    if _shared_profile():
        raise StoreUnavailable(
            f"checkpoint store: the cluster profile has no {CHECKPOINT_BLOCK!r} block and no "
            "YOLOQ_CHECKPOINT_URI; set one (a node-local folder would strand the job on this node)")
    return LocalCheckpointStore(path=str(state_paths().checkpoints))


def mlflow_tracking_uri() -> tuple[str, str]:
    """(tracking URI, experiment name)."""
    from blocks.mlflow import MlflowLocation

    block = _saved(MlflowLocation, MLFLOW_BLOCK, "MLflow location")
    experiment = settings().mlflow_experiment
    if block is not None:
        experiment = block.experiment
        if block.tracking_uri:
            return block.tracking_uri, experiment
    uri = settings().mlflow_uri
    if uri:
        return uri, experiment
    if _shared_profile():
        raise StoreUnavailable(
            f"MLflow location: the cluster profile has no {MLFLOW_BLOCK!r} block and no "
            "YOLOQ_MLFLOW_URI; set one (a node-local store would split the job's run)")
    return state_paths().mlflow_uri, experiment


def _saved(cls, name: str, what: str):
    from blocks.saved import BlockUnreadable, load_saved

    try:
        return load_saved(cls, name)
    except BlockUnreadable as exc:
        raise StoreUnavailable(f"{what}: {exc}") from exc

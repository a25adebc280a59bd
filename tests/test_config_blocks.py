"""Configuration blocks on the real server: a saved checkpoint store (either kind) and MLflow
location are what every yoloq process then uses; without them, the embedded defaults."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from blocks.checkpoints import CheckpointStore, LocalCheckpointStore, S3CheckpointStore
from blocks.mlflow import MlflowLocation
from blocks import stores
from yoloq.base.names import CHECKPOINT_BLOCK, MLFLOW_BLOCK

pytestmark = pytest.mark.service


def _delete(name: str, slug: str) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.delete_block_document(client.read_block_document_by_name(name, slug).id)


def test_saved_blocks_configure_the_stores(yoloq_stack, tmp_path):
    default_store = stores.checkpoint_store()
    assert isinstance(default_store, LocalCheckpointStore)
    assert default_store.path == str(yoloq_stack.paths.checkpoints)

    LocalCheckpointStore(path=str(tmp_path / "shared"), keep=5).save(CHECKPOINT_BLOCK)
    MlflowLocation(tracking_uri=f"sqlite:///{tmp_path / 'team.db'}", experiment="team").save(
        MLFLOW_BLOCK)
    try:
        store = stores.checkpoint_store()
        assert isinstance(store, LocalCheckpointStore) and store.path == str(tmp_path / "shared")
        assert store.keep == 5
        assert stores.mlflow_tracking_uri() == (f"sqlite:///{tmp_path / 'team.db'}", "team")
    finally:
        _delete(CHECKPOINT_BLOCK, LocalCheckpointStore.get_block_type_slug())
        _delete(MLFLOW_BLOCK, MlflowLocation.get_block_type_slug())
    assert stores.checkpoint_store().path == str(yoloq_stack.paths.checkpoints)


def test_the_base_class_loads_a_saved_s3_store(yoloq_stack):
    S3CheckpointStore(bucket="ckpts", prefix="team-a", endpoint_url="http://127.0.0.1:9",
                      access_key_id="k", secret_access_key=SecretStr("s")).save("s3-ckpts")
    try:
        loaded = CheckpointStore.load("s3-ckpts")
    finally:
        _delete("s3-ckpts", S3CheckpointStore.get_block_type_slug())
    assert isinstance(loaded, S3CheckpointStore)
    assert (loaded.bucket, loaded.prefix) == ("ckpts", "team-a")
    assert loaded.secret_access_key.get_secret_value() == "s"

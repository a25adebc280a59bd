"""The rules every fault test relies on, without a server: which errors are transient,
how long a parent waits, when a restored checkpoint contradicts the plan, and that a
shared profile has no node-local default."""

from __future__ import annotations

from pathlib import Path

import pytest

from blocks.checkpoint_base import CheckpointInfo, RestoredCheckpoint
from flows.recovery import backoff_s
from yoloq.base.retry import is_transient
from flows.segment import plan_mismatch
from blocks import stores
from yoloq.base.errors import StoreUnavailable
from yoloq.engine.segment import ResumeMismatch
from yoloq.base.errors import SpecError


def _restored(epoch: int, skipped: list[int] | None = None) -> RestoredCheckpoint:
    info = CheckpointInfo("job", epoch, "0" * 64, 1, f"job/epoch-{epoch:06d}.pt", "now")
    return RestoredCheckpoint(info=info, path=Path("x.pt"), skipped=skipped or [])


@pytest.mark.parametrize("planned, restored, ok", [
    pytest.param(0, None, True, id="new-job"),
    pytest.param(3, _restored(3), True, id="as-planned"),
    pytest.param(3, _restored(4), True, id="moved-on"),
    pytest.param(3, _restored(2, skipped=[3]), True, id="newer-one-corrupt"),
    pytest.param(3, None, False, id="store-lost-everything"),
    pytest.param(3, _restored(1), False, id="store-behind"),
    pytest.param(3, _restored(1, skipped=[2]), False, id="corrupt-but-still-behind"),
])
def test_plan_check(planned, restored, ok):
    problem = plan_mismatch({"epochs_done": planned}, restored)
    assert (problem is None) is ok, problem
    if not ok:
        assert problem.startswith("plan.epochs_done:") and "\n" not in problem


@pytest.mark.parametrize("exc, transient", [
    pytest.param(ConnectionRefusedError(111, "refused"), True, id="connection"),
    pytest.param(OSError(28, "No space left on device"), True, id="disk-full"),
    pytest.param(StoreUnavailable("block unreadable"), True, id="store-unavailable"),
    pytest.param(SpecError("epochs", "bad"), False, id="user-error"),
    pytest.param(ResumeMismatch("holds 2, says 3"), False, id="resume-mismatch"),
    pytest.param(ZeroDivisionError(), False, id="a-bug"),
])
def test_transient_errors(exc, transient):
    assert is_transient(exc) is transient


def test_transient_library_errors():
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import EndpointConnectionError
    from mlflow.exceptions import MlflowException

    assert is_transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    # what boto3 raised in CI when Swift answered 503 past botocore's retries
    assert is_transient(S3UploadFailedError(
        "Failed to upload last.pt to yoloq/x.pt: An error occurred (ServiceUnavailable) when "
        "calling the CreateMultipartUpload operation: Please reduce your request rate."))
    assert is_transient(MlflowException("API request failed: Max retries exceeded"))


def test_backoff_first_retry_is_immediate_then_doubles(monkeypatch):
    monkeypatch.setenv("YOLOQ_RETRY_BACKOFF_S", "10")
    assert [backoff_s(n) for n in range(1, 6)] == [0, 10, 20, 40, 80]
    assert backoff_s(20) == 300


def test_the_cluster_profile_has_no_node_local_default(monkeypatch):
    for key in ("YOLOQ_CHECKPOINT_URI", "YOLOQ_MLFLOW_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "0")
    monkeypatch.setenv("YOLOQ_PROFILE", "cluster")
    with pytest.raises(StoreUnavailable, match="YOLOQ_CHECKPOINT_URI"):
        stores.checkpoint_store()
    with pytest.raises(StoreUnavailable, match="YOLOQ_MLFLOW_URI"):
        stores.mlflow_tracking_uri()
    monkeypatch.setenv("YOLOQ_PROFILE", "local")
    assert stores.checkpoint_store().location().startswith("file://")


def test_history_rows_show_each_training_and_mark_a_repeat(monkeypatch, tmp_path):
    from blocks.checkpoint_base import EpochRecord
    from blocks.checkpoints import LocalCheckpointStore
    from yoloq.views.timeline import ledger_rows

    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "0")
    monkeypatch.setenv("YOLOQ_CHECKPOINT_URI", str(tmp_path / "store"))
    rows = [EpochRecord("job", 1, "run-a", "gpu-1", "t0", "t1"),
            EpochRecord("job", 2, "run-a", "gpu-1", "t1", "t2"),
            EpochRecord("job", 2, "run-b", "gpu-2", "t3", "t4")]
    data = tmp_path / "ckpt.pt"
    data.write_bytes(b"weights")
    LocalCheckpointStore(path=str(tmp_path / "store")).save_checkpoint("job", 2, data, trainings=rows)
    shown = ledger_rows("job", {"run-a": "job.s1.e0-2", "run-b": "job.s2.e1-2"})
    assert [(r["what"], r["epoch"], r["node"]) for r in shown] == [
        ("trained", 1, "gpu-1"), ("trained", 2, "gpu-1"), ("trained", 2, "gpu-2")]
    assert shown[1]["detail"] == "epoch 2 by job.s1.e0-2 on gpu-1"
    assert shown[2]["detail"] == "epoch 2 by job.s2.e1-2 on gpu-2, trained 2 times"


def test_history_says_when_the_ledger_cannot_be_read(monkeypatch):
    from yoloq.views.timeline import ledger_rows

    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "0")
    monkeypatch.delenv("YOLOQ_CHECKPOINT_URI", raising=False)
    monkeypatch.setenv("YOLOQ_PROFILE", "cluster")  # no store configured: an error, shown
    [row] = ledger_rows("job", {})
    assert row["what"] == "ledger unavailable" and "YOLOQ_CHECKPOINT_URI" in row["detail"]

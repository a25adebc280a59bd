"""One contract, two stores: every test runs against the local folder store (`local`)
and the S3 store on a real OpenStack Swift s3api server (`s3`).

The Swift server is started through `profiles/cluster/services.sh start s3` when it is
not already running, and stopped again at the end of this module unless it was
already running or YOLOQ_KEEP_SERVICES=1. If it cannot start, the S3 tests fail with
the script's reason; they are never skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from blocks.checkpoint_base import EpochRecord
from blocks.checkpoints import (
    CheckpointStore,
    LocalCheckpointStore,
    S3CheckpointStore,
    metadata_key,
    store_from_uri,
)

from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

REPO = Path(__file__).resolve().parents[1]
SERVICES = REPO / "profiles" / "cluster" / "services.sh"


# ---------------------------------------------------------------- the S3 server

def _services(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("YOLOQ_SERVICES_DIR", str(REPO / ".yoloq" / "services"))
    return subprocess.run([str(SERVICES), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def _parse_exports(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, _, value = words[1].partition("=")
            values[key] = value
    return values


@pytest.fixture(scope="module")
def s3_env() -> Any:
    was_running = "s3: running" in _services("status").stdout
    if not was_running:
        started = _services("start", "s3")
        if started.returncode != 0:
            pytest.fail(f"services.sh start s3 failed (rc {started.returncode}):\n{started.stderr[-3000:]}")
    yield _parse_exports(_services("env").stdout)
    if not was_running and os.environ.get("YOLOQ_KEEP_SERVICES") != "1":
        _services("stop", "s3")


# ---------------------------------------------------------------- the two stores

@dataclass
class Backend:
    """A store plus raw access to what it wrote, to damage it the way real failures do."""

    store: CheckpointStore
    read: Callable[[str], bytes]
    write: Callable[[str, bytes], Any]
    delete: Callable[[str], None]
    keys: Callable[[str], list[str]]
    uri: str
    uri_kwargs: dict[str, Any]


def _local_backend(root: Path) -> Backend:
    def write(key: str, data: bytes) -> None:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)

    def keys(job_id: str) -> list[str]:
        folder = root / job_id
        return sorted(f"{job_id}/{p.name}" for p in folder.iterdir()) if folder.is_dir() else []

    return Backend(store=LocalCheckpointStore(path=str(root)), read=lambda k: (root / k).read_bytes(),
                   write=write, delete=lambda k: (root / k).unlink(), keys=keys,
                   uri=root.as_uri(), uri_kwargs={})


def _s3_backend(env: dict[str, str]) -> Backend:
    settings = dict(endpoint_url=env["YOLOQ_S3_ENDPOINT_URL"], access_key_id=env["AWS_ACCESS_KEY_ID"],
                    secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    bucket, prefix = env["YOLOQ_S3_BUCKET"], f"tests/{uuid.uuid4().hex[:12]}"
    store = S3CheckpointStore(bucket=bucket, prefix=prefix, **settings)
    client = store.client()

    def keys(job_id: str) -> list[str]:
        listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{job_id}/").get("Contents", [])
        return sorted(item["Key"][len(prefix) + 1:] for item in listed)

    return Backend(
        store=store,
        read=lambda k: client.get_object(Bucket=bucket, Key=f"{prefix}/{k}")["Body"].read(),
        write=lambda k, data: client.put_object(Bucket=bucket, Key=f"{prefix}/{k}", Body=data),
        delete=lambda k: client.delete_object(Bucket=bucket, Key=f"{prefix}/{k}"),
        keys=keys, uri=f"s3://{bucket}/{prefix}", uri_kwargs=settings)


@pytest.fixture(params=[pytest.param("local", id="local"),
                        pytest.param("s3", id="s3", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        yield _local_backend(tmp_path / "store")
        return
    made = _s3_backend(request.getfixturevalue("s3_env"))
    yield made
    for job_id in ("job-a", "job-b", "job-ab", "big"):
        made.store.delete_job(job_id)


def _payload(tmp_path: Path, name: str, size: int = 4096) -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(size))
    return path


def _save_epochs(store: CheckpointStore, tmp_path: Path, job_id: str, epochs: list[int]) -> dict[int, bytes]:
    saved = {}
    for epoch in epochs:
        path = _payload(tmp_path, f"{job_id}-{epoch}.pt", 2048 + epoch)
        store.save(job_id, epoch, path)
        saved[epoch] = path.read_bytes()
    return saved


# ---------------------------------------------------------------- the contract

def test_save_list_latest_restore_roundtrip(backend: Backend, tmp_path: Path) -> None:
    path = _payload(tmp_path, "last.pt", 300_000)
    info = backend.store.save("job-a", 4, path)

    assert (info.job_id, info.epoch, info.size) == ("job-a", 4, 300_000)
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert backend.store.list("job-a") == [info]
    assert backend.store.latest("job-a") == info
    restored = backend.store.restore("job-a", tmp_path / "out" / "nested")
    assert restored is not None and restored.info == info and restored.warnings == []
    assert restored.path.read_bytes() == path.read_bytes()
    assert backend.read(info.key) == path.read_bytes()


def test_unknown_job_has_nothing(backend: Backend, tmp_path: Path) -> None:
    assert backend.store.list("job-a") == []
    assert backend.store.latest("job-a") is None
    assert backend.store.restore("job-a", tmp_path / "out") is None
    assert backend.store.delete_job("job-a") == 0


def test_list_is_ordered_by_epoch_and_keys_sort_the_same(backend: Backend, tmp_path: Path) -> None:
    backend.store.keep = 10
    _save_epochs(backend.store, tmp_path, "job-a", [10, 2, 9, 100])

    infos = backend.store.list("job-a")
    assert [i.epoch for i in infos] == [2, 9, 10, 100]
    assert sorted(i.key for i in infos) == [i.key for i in infos]
    assert backend.store.latest("job-a").epoch == 100


def test_keeps_the_last_k_and_prune_reports_what_went(backend: Backend, tmp_path: Path) -> None:
    saved = _save_epochs(backend.store, tmp_path, "job-a", list(range(6)))

    infos = backend.store.list("job-a")
    assert [i.epoch for i in infos] == [3, 4, 5]
    assert len(backend.keys("job-a")) == 6  # data + metadata of each kept checkpoint, nothing else
    assert backend.store.prune("job-a", keep=1) == 2
    assert [i.epoch for i in backend.store.list("job-a")] == [5]
    assert backend.store.restore("job-a", tmp_path / "out").path.read_bytes() == saved[5]


def test_saving_an_epoch_again_replaces_it(backend: Backend, tmp_path: Path) -> None:
    _save_epochs(backend.store, tmp_path, "job-a", [1, 2])
    again = _payload(tmp_path, "again.pt", 5000)
    info = backend.store.save("job-a", 2, again)

    assert [i.epoch for i in backend.store.list("job-a")] == [1, 2]
    assert backend.store.latest("job-a") == info
    assert backend.store.restore("job-a", tmp_path / "out").path.read_bytes() == again.read_bytes()
    assert len(backend.keys("job-a")) == 4  # the replaced data object is gone


def _truncate(backend: Backend, key: str) -> None:
    data = backend.read(key)
    backend.write(key, data[: len(data) // 2])


def _flip_a_byte(backend: Backend, key: str) -> None:
    data = bytearray(backend.read(key))
    data[len(data) // 2] ^= 0xFF
    backend.write(key, bytes(data))


@pytest.mark.parametrize("damage, problem", [
    pytest.param(_truncate, "truncated", id="truncated"),
    pytest.param(_flip_a_byte, "corrupt", id="corrupt"),
    pytest.param(lambda backend, key: backend.delete(key), "missing", id="missing"),
])
def test_damaged_latest_falls_back_to_previous(backend: Backend, tmp_path: Path, caplog: Any,
                                               damage: Callable[[Backend, str], None], problem: str) -> None:
    saved = _save_epochs(backend.store, tmp_path, "job-a", [1, 2, 3])
    damage(backend, backend.store.latest("job-a").key)

    with caplog.at_level(logging.WARNING, logger="yoloq.checkpoints"):
        restored = backend.store.restore("job-a", tmp_path / "out")

    assert restored is not None and restored.info.epoch == 2
    assert restored.path.read_bytes() == saved[2]
    assert len(restored.warnings) == 1 and problem in restored.warnings[0]
    assert "epoch 3" in restored.warnings[0]
    assert restored.warnings[0] in caplog.messages
    assert restored.skipped == [3]  # the plan check accepts this fallback, and only this one
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["epoch-000002.pt"]  # no partial left


def test_metadata_carries_the_epoch_ledger_and_the_finished_flag(backend: Backend,
                                                                  tmp_path: Path) -> None:
    rows = [EpochRecord("job-a", epoch, f"seg-{seg}", "node-1", f"t{epoch}s", f"t{epoch}e")
            for epoch, seg in ((1, 1), (2, 1), (2, 2))]
    backend.store.save_checkpoint("job-a", 1, _payload(tmp_path, "one.pt"), trainings=rows[:1])
    backend.store.save_checkpoint("job-a", 2, _payload(tmp_path, "two.pt"), finished=True,
                                  trainings=rows)
    first, latest = backend.store.list("job-a")
    assert (first.finished, first.trainings) == (False, tuple(rows[:1]))
    assert (latest.finished, latest.trainings) == (True, tuple(rows))
    assert trainings_per_epoch(list(latest.trainings)) == {1: 1, 2: 2}
    assert epoch_trainings("job-a", backend.store) == rows


def test_metadata_without_ledger_still_reads(backend: Backend, tmp_path: Path) -> None:
    """Checkpoints written before the ledger existed: no rows, not finished."""
    backend.store.save_checkpoint("job-a", 1, _payload(tmp_path, "old.pt"))
    raw = json.loads(backend.read(metadata_key("job-a", 1)))
    backend.write(metadata_key("job-a", 1), json.dumps(
        {k: v for k, v in raw.items() if k not in ("finished", "trainings")}).encode())
    info = backend.store.latest("job-a")
    assert info is not None and (info.finished, info.trainings) == (False, ())


def test_everything_damaged_restores_nothing(backend: Backend, tmp_path: Path) -> None:
    _save_epochs(backend.store, tmp_path, "job-a", [1, 2])
    for info in backend.store.list("job-a"):
        _truncate(backend, info.key)

    assert backend.store.restore("job-a", tmp_path / "out") is None


def test_checkpoint_without_metadata_is_ignored(backend: Backend, tmp_path: Path) -> None:
    saved = _save_epochs(backend.store, tmp_path, "job-a", [1, 2])
    backend.delete(metadata_key("job-a", 2))  # a writer that died between data and metadata
    backend.write("job-a/epoch-000007-0123456789ab.pt", b"half a checkpoint")  # one still writing

    assert [i.epoch for i in backend.store.list("job-a")] == [1]
    restored = backend.store.restore("job-a", tmp_path / "out")
    assert restored.info.epoch == 1 and restored.warnings == []
    assert restored.path.read_bytes() == saved[1]


def test_unreadable_metadata_is_ignored(backend: Backend, tmp_path: Path) -> None:
    _save_epochs(backend.store, tmp_path, "job-a", [1, 2])
    backend.write(metadata_key("job-a", 2), b"{not json")

    assert [i.epoch for i in backend.store.list("job-a")] == [1]


def test_jobs_are_isolated(backend: Backend, tmp_path: Path) -> None:
    a = _save_epochs(backend.store, tmp_path, "job-a", [1])
    ab = _save_epochs(backend.store, tmp_path, "job-ab", [5])  # a name that starts with another
    b = _save_epochs(backend.store, tmp_path, "job-b", [1, 2])

    assert [i.epoch for i in backend.store.list("job-a")] == [1]
    assert backend.store.restore("job-a", tmp_path / "a").path.read_bytes() == a[1]
    assert backend.store.delete_job("job-a") == 1
    assert backend.store.list("job-a") == [] and backend.keys("job-a") == []
    assert backend.store.restore("job-ab", tmp_path / "ab").path.read_bytes() == ab[5]
    assert backend.store.restore("job-b", tmp_path / "b").path.read_bytes() == b[2]


@pytest.mark.parametrize("job_id", [
    pytest.param("../escape", id="parent"), pytest.param("a/b", id="slash"),
    pytest.param("", id="empty"), pytest.param(".hidden", id="dot-first"),
])
def test_unsafe_job_ids_are_refused(backend: Backend, tmp_path: Path, job_id: str) -> None:
    with pytest.raises(ValueError, match="job_id"):
        backend.store.save(job_id, 1, _payload(tmp_path, "x.pt"))
    with pytest.raises(ValueError, match="job_id"):
        backend.store.list(job_id)


def test_a_reader_never_sees_a_partial_checkpoint(backend: Backend, tmp_path: Path) -> None:
    """A reader loops over latest/restore while a writer saves big files (multipart on S3)."""
    backend.store.keep = 10
    sizes = {1: 24 << 20, 2: 20 << 20, 3: 24 << 20}
    payloads = {epoch: _payload(tmp_path, f"big-{epoch}.pt", size) for epoch, size in sizes.items()}
    expected = {epoch: hashlib.sha256(p.read_bytes()).hexdigest() for epoch, p in payloads.items()}
    done = threading.Event()
    seen: list[tuple[int, str]] = []
    problems: list[str] = []

    def read_until_done() -> None:
        while not done.is_set():
            latest = backend.store.latest("big")
            if latest is not None and latest.sha256 != expected[latest.epoch]:
                problems.append(f"latest() described epoch {latest.epoch} with a foreign sha256")
            restored = backend.store.restore("big", tmp_path / "reader", filename="last.pt")
            if restored is None:
                continue
            actual = hashlib.sha256(restored.path.read_bytes()).hexdigest()
            seen.append((restored.info.epoch, actual))
            if actual != expected[restored.info.epoch] or restored.warnings:
                problems.append(f"epoch {restored.info.epoch}: {actual[:12]} {restored.warnings}")

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for epoch, path in payloads.items():
            backend.store.save("big", epoch, path)
    finally:
        done.set()
        reader.join()

    assert problems == []
    final = backend.store.restore("big", tmp_path / "final")
    assert final.info.epoch == 3 and final.path.read_bytes() == payloads[3].read_bytes()
    assert all(sha == expected[epoch] for epoch, sha in seen)


def test_store_from_uri_reaches_the_same_checkpoints(backend: Backend, tmp_path: Path) -> None:
    saved = _save_epochs(backend.store, tmp_path, "job-a", [1, 2])
    same = store_from_uri(backend.uri, keep=2, **backend.uri_kwargs)

    assert type(same) is type(backend.store)
    assert same.list("job-a") == backend.store.list("job-a")
    assert same.restore("job-a", tmp_path / "via-uri").path.read_bytes() == saved[2]
    same.save("job-a", 3, _payload(tmp_path, "three.pt"))
    assert [i.epoch for i in backend.store.list("job-a")] == [2, 3]  # keep=2 from the URI store


# ---------------------------------------------------------------- URIs and blocks (no server)

@pytest.mark.parametrize("uri, kind, where", [
    pytest.param("s3://bucket/some/prefix", S3CheckpointStore, ("bucket", "some/prefix"), id="s3-prefix"),
    pytest.param("s3://bucket", S3CheckpointStore, ("bucket", "yoloq/checkpoints"), id="s3-bucket-only"),
    pytest.param("file:///srv/ckpt", LocalCheckpointStore, ("/srv/ckpt",), id="file-uri"),
    pytest.param("/srv/ckpt", LocalCheckpointStore, ("/srv/ckpt",), id="absolute-path"),
    pytest.param("relative/ckpt", LocalCheckpointStore, ("relative/ckpt",), id="relative-path"),
])
def test_store_from_uri_parses(uri: str, kind: type, where: tuple[str, ...]) -> None:
    store = store_from_uri(uri, keep=5)
    assert type(store) is kind and store.keep == 5
    if kind is S3CheckpointStore:
        assert (store.bucket, store.prefix) == where
    else:
        assert (store.path,) == where


@pytest.mark.parametrize("uri", [
    pytest.param("s3:///prefix-only", id="s3-no-bucket"),
    pytest.param("gs://bucket/x", id="other-scheme"),
    pytest.param("file://otherhost/x", id="remote-file"),
])
def test_store_from_uri_refuses(uri: str) -> None:
    with pytest.raises(ValueError, match="checkpoint URI"):
        store_from_uri(uri)


def test_blocks_are_registerable_types() -> None:
    """The two concrete stores build Prefect block schemas; the interface class does not register."""
    s3 = S3CheckpointStore._to_block_schema()
    local = LocalCheckpointStore._to_block_schema()
    assert {"bucket", "prefix", "endpoint_url", "keep"} <= set(s3.fields["properties"])
    assert s3.fields["secret_fields"] == ["secret_access_key"]
    assert {"path", "keep"} <= set(local.fields["properties"])
    assert S3CheckpointStore.get_block_type_slug() != LocalCheckpointStore.get_block_type_slug()
    with pytest.raises(Exception, match="interface"):
        CheckpointStore.register_type_and_schema()


# ---------------------------------------------------------------- retried saves (a real fault:
# the job's folder is blocked by a file, so every write fails with an OSError until it goes)

def test_a_save_is_retried_until_the_store_takes_it(tmp_path: Path, caplog: Any) -> None:
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    blocker = tmp_path / "store" / "job-a"
    blocker.parent.mkdir()
    blocker.write_text("not a folder")
    threading.Timer(1.5, blocker.unlink).start()
    with caplog.at_level(logging.WARNING, logger="yoloq.checkpoints"):
        info = store.save_retrying("job-a", 1, _payload(tmp_path, "one.pt"), limit_s=30)
    assert any("retrying in" in m for m in caplog.messages), "the first attempt failed"
    assert store.latest("job-a") == info


def test_a_save_past_the_retry_limit_raises(tmp_path: Path) -> None:
    store = LocalCheckpointStore(path=str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "job-a").write_text("not a folder")
    with pytest.raises(OSError):
        store.save_retrying("job-a", 1, _payload(tmp_path, "one.pt"), limit_s=2)
    assert (tmp_path / "store" / "job-a").read_text() == "not a folder", "nothing written elsewhere"

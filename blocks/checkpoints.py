"""Checkpoint store blocks: a local (or NFS-mounted) folder, or an S3 bucket.

    store = store_from_uri("s3://yoloq/checkpoints")   # or a folder, or file:///...
    info = store.save(job_id, epoch, Path("last.pt"))  # atomic, sha256, keeps the last `keep`
    restored = store.restore(job_id, scratch_dir)      # newest checkpoint that verifies

`prefect block register -m blocks.checkpoints` registers both block types.
"""

from __future__ import annotations

import builtins
import os
import shutil
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote, urlparse

from pydantic import Field

from blocks.checkpoint_base import (
    CheckpointInfo,
    CheckpointStore,
    MissingObject,
    RestoredCheckpoint,
    check_job_id,
    metadata_key,
)
from blocks.s3 import S3CheckpointStore
from yoloq.base.atomic import write_atomically

__all__ = ["CheckpointInfo", "CheckpointStore", "LocalCheckpointStore", "RestoredCheckpoint",
           "S3CheckpointStore", "metadata_key", "store_from_uri"]

_TEMP_PREFIX = ".tmp-"


class LocalCheckpointStore(CheckpointStore):
    """Checkpoints in a folder: local disk for one host, a shared mount for a cluster."""

    _block_type_name = "yoloq Local Checkpoint Store"
    _description = ("yoloq training checkpoints in a folder (an NFS mount works for several "
                    "nodes). Writes are atomic: temp file, fsync, rename, then metadata.")

    path: str = Field(description="The folder that holds one subfolder per job.")

    def location(self) -> str:
        return self._root().as_uri()

    def _root(self) -> Path:
        return Path(self.path).expanduser().absolute()

    def _file(self, key: str) -> Path:
        return self._root() / key

    def _put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as source:
            self._write_atomically(self._file(key), lambda out: shutil.copyfileobj(source, out, 1 << 20))

    def _put_bytes(self, key: str, data: bytes) -> None:
        self._write_atomically(self._file(key), lambda out: out.write(data))

    def _get_bytes(self, key: str) -> bytes:
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError as exc:
            raise MissingObject(key) from exc

    def _download(self, key: str, dest: Path) -> None:
        try:
            shutil.copyfile(self._file(key), dest)
        except FileNotFoundError as exc:
            raise MissingObject(key) from exc

    def _list_keys(self, job_id: str) -> builtins.list[str]:
        try:
            names = os.listdir(self._root() / job_id)
        except FileNotFoundError:
            return []
        return [f"{job_id}/{name}" for name in names if not name.startswith(_TEMP_PREFIX)]

    def _delete_keys(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._file(key).unlink(missing_ok=True)

    def delete_job(self, job_id: str) -> int:
        count = super().delete_job(check_job_id(job_id))
        folder = self._root() / job_id
        for leftover in folder.glob(f"{_TEMP_PREFIX}*") if folder.is_dir() else []:
            leftover.unlink(missing_ok=True)
        if folder.is_dir():
            folder.rmdir()
        return count

    @staticmethod
    def _write_atomically(target: Path, write: Any) -> None:
        write_atomically(target, write, prefix=_TEMP_PREFIX)


def store_from_uri(uri: str, **kwargs: Any) -> CheckpointStore:
    """`s3://bucket[/prefix]`, `file:///folder` or a plain folder path -> a store block.

    Extra keyword arguments go to the block (`keep`, and for S3 `endpoint_url`,
    `access_key_id`, `secret_access_key`, `region_name`). Unset S3 settings fall
    back to boto3's own environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).
    """
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"checkpoint URI {uri!r} names no bucket (expected s3://bucket/prefix)")
        prefix = parsed.path.strip("/")
        if prefix:
            kwargs.setdefault("prefix", prefix)
        return S3CheckpointStore(bucket=parsed.netloc, **kwargs)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"checkpoint URI {uri!r}: file URIs must be local (file:///path)")
        return LocalCheckpointStore(path=unquote(parsed.path), **kwargs)
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive
        raise ValueError(f"checkpoint URI {uri!r}: unsupported scheme {parsed.scheme!r} "
                         "(use s3://bucket/prefix, file:///folder or a folder path)")
    return LocalCheckpointStore(path=str(Path(uri).expanduser()), **kwargs)

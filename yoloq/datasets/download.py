"""Copy a dataset's objects to a folder, verifying every one, with progress in the log.

Each object is checked against its listing: the GET's ETag must be the listed one (else the
object changed during the copy), the byte count its size, and the content its ETag: a plain
ETag is the MD5 of the bytes; a multipart ETag (`<md5 of part md5s>-<parts>`) is recomputed
for the usual part sizes. An ETag that is neither (e.g. SSE-KMS on AWS) is checked by size
only, and the manifest says so.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from yoloq.datasets.s3_source import (
    DatasetUnreachable,
    S3Dataset,
    S3Object,
    fetch_error,
)
from yoloq.base.errors import DatasetError

MIB = 1024 * 1024
_CHUNK = MIB
_COPIERS = 8
_PROGRESS_EVERY_S = 5.0
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_MULTIPART = re.compile(r"^([0-9a-f]{32})-(\d+)$")
_PART_SIZES_MIB = (8, 16, 5, 15, 32, 64, 100, 128, 256, 512)  # boto3, aws cli, s3cmd, rclone, ...


def etag_kind(etag: str) -> str:
    etag = etag.lower()
    return "md5" if _MD5.match(etag) else "multipart" if _MULTIPART.match(etag) else "size"


def multipart_etag(path: Path, part_size: int) -> str:
    digests, count = hashlib.md5(), 0
    with open(path, "rb") as source:
        while part := source.read(part_size):
            digests.update(hashlib.md5(part).digest())
            count += 1
    return f"{digests.hexdigest()}-{count}"


def multipart_matches(path: Path, size: int, etag: str) -> bool:
    """Whether some usual part size reproduces the multipart ETag of the file."""
    parts = int(etag.rsplit("-", 1)[1])
    for mib in _PART_SIZES_MIB:
        part = mib * MIB
        if -(-size // part) == parts and multipart_etag(path, part) == etag:
            return True
    return False


def content_matches(path: Path, size: int, etag: str, md5_hex: str) -> bool:
    kind = etag_kind(etag)
    if kind == "md5":
        return md5_hex == etag.lower()
    if kind == "multipart":
        return multipart_matches(path, size, etag.lower())
    return True  # not an MD5: the size check is all there is


@dataclass
class Progress:
    """Objects and bytes copied so far, logged at most every few seconds and at the end."""

    label: str
    objects: int
    total: int
    logger: Any
    done_objects: int = 0
    done_bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    _last: float = 0.0
    _lock: Any = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._last = self.started  # the first line after a few seconds, not at the first object

    def add(self, size: int) -> None:
        with self._lock:
            self.done_objects += 1
            self.done_bytes += size
            now = time.monotonic()
            if self.done_objects < self.objects and now - self._last < _PROGRESS_EVERY_S:
                return
            self._last = now
        rate = self.done_bytes / 1e6 / max(now - self.started, 1e-3)
        percent = 100 * self.done_bytes / self.total if self.total else 100.0
        self.logger.info("dataset %s: %d/%d objects, %.1f/%.1f MB (%.0f%%), %.1f MB/s", self.label,
                         self.done_objects, self.objects, self.done_bytes / 1e6, self.total / 1e6,
                         percent, rate)


def copy_object(client: Any, dataset: S3Dataset, obj: S3Object, folder: Path) -> str:
    """Download one object into `folder` and verify it; return how it was verified."""
    uri = dataset.root.child(obj.key).uri
    dest = (folder / obj.key).resolve()
    if not dest.is_relative_to(folder.resolve()):
        raise DatasetError("data", f"{uri}: the key leads outside the dataset folder",
                           "rename the object without '..' in its key")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        response = client.get_object(Bucket=dataset.root.bucket, Key=dataset.root.child(obj.key).key)
        etag = str(response.get("ETag", "")).strip('"')
        if etag != obj.etag:
            raise DatasetUnreachable(f"{uri} changed during the copy (ETag {obj.etag} -> {etag})",
                                     "let the upload finish; the segment is retried")
        md5, size = hashlib.md5(), 0
        with open(dest, "wb") as out:
            for chunk in response["Body"].iter_chunks(_CHUNK):
                out.write(chunk)
                md5.update(chunk)
                size += len(chunk)
    except (BotoCoreError, ClientError) as exc:
        raise fetch_error(uri, exc) from None
    return verify_copy(uri, dest, obj, size, md5.hexdigest())


def verify_copy(uri: str, dest: Path, obj: S3Object, size: int, md5_hex: str) -> str:
    if size != obj.size:
        raise DatasetUnreachable(f"{uri}: copied {size} of {obj.size} bytes (incomplete download)",
                                 "check the connection to the S3 endpoint; the segment is retried")
    if not content_matches(dest, size, obj.etag, md5_hex):
        raise DatasetUnreachable(f"{uri}: the copy does not match its ETag {obj.etag} (corrupted download)",
                                 "check the connection to the S3 endpoint; the segment is retried")
    return etag_kind(obj.etag)


def copy_dataset(client: Any, dataset: S3Dataset, folder: Path, logger: Any) -> dict[str, int]:
    """Copy every object of the dataset into `folder`, concurrently; counts by verification kind."""
    progress = Progress(dataset.yaml.uri, len(dataset.objects), dataset.size, logger)
    logger.info("dataset %s: copying %d objects (%.1f MB) from %s/", dataset.yaml.uri,
                len(dataset.objects), dataset.size / 1e6, dataset.root.uri)
    kinds: dict[str, int] = {}

    def one(obj: S3Object) -> None:
        kind = copy_object(client, dataset, obj, folder)
        progress.add(obj.size)
        with progress._lock:
            kinds[kind] = kinds.get(kind, 0) + 1

    with ThreadPoolExecutor(max_workers=_COPIERS) as pool:
        futures = [pool.submit(one, obj) for obj in dataset.objects]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for future in pending:
            future.cancel()
        for future in done:
            future.result()  # the first failure, if any
    if kinds.get("size"):
        logger.warning("dataset %s: %d objects have no MD5 ETag (e.g. SSE-KMS) and were checked by size only",
                       dataset.yaml.uri, kinds["size"])
    return kinds

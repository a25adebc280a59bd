"""A dataset in S3: `s3://bucket/prefix/data.yaml`, its root prefix and the objects under it.

The root is the data YAML's folder, or its `path:` when that is relative (resolved from the
YAML's folder, as for a local dataset) or an `s3://` URI. An absolute local `path:` (a YAML
uploaded as is from a workstation) is ignored with a warning. Every object under the root
belongs to the dataset: that listing (key, size, ETag) is what the node cache hashes and copies.

The S3 client is the checkpoint store's (same endpoint and credentials) when that store is
S3, else boto3's own environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), built by
`blocks.s3.make_s3_client` either way.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from yoloq.analysis.dataset import load_data_yaml
from yoloq.base.errors import DatasetError

_MISSING = {"404", "NoSuchKey", "NotFound"}
_DENIED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}
_CREDENTIALS_FIX = ("give this node read access: the `yoloq-checkpoints` S3 block, or "
                    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_ENDPOINT_URL")


def is_s3_uri(data: object) -> bool:
    return str(data).startswith("s3://")


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str  # no leading slash; a prefix has no trailing slash ("" is the bucket root)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"

    def child(self, relative: str) -> S3Uri:
        return S3Uri(self.bucket, f"{self.key}/{relative}" if self.key else relative)

    def relative(self, key: str) -> str | None:
        """`key` relative to this prefix, or None when it lies outside."""
        if not self.key:
            return key
        return key[len(self.key) + 1:] if key.startswith(self.key + "/") else None


@dataclass(frozen=True)
class S3Object:
    key: str  # relative to the dataset root
    size: int
    etag: str  # without quotes


@dataclass(frozen=True)
class S3Dataset:
    yaml: S3Uri
    yaml_etag: str
    data: dict[str, Any]
    root: S3Uri
    objects: tuple[S3Object, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def size(self) -> int:
        return sum(o.size for o in self.objects)

    @cached_property
    def keys(self) -> frozenset[str]:
        return frozenset(o.key for o in self.objects)

    def under(self, prefix: str) -> list[str]:
        """Root-relative keys under a root-relative prefix ("." is the whole root)."""
        if prefix == ".":
            return [o.key for o in self.objects]
        return [o.key for o in self.objects if o.key.startswith(prefix + "/")]


def parse_s3_uri(uri: str, field_name: str = "data") -> S3Uri:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    key = key.strip("/")
    if not bucket:
        raise DatasetError(field_name, f"{uri!r} names no bucket", "write s3://bucket/prefix/data.yaml")
    return S3Uri(bucket, posixpath.normpath(key) if key else "")


def dataset_client() -> Any:
    """An S3 client with the checkpoint store's endpoint and credentials (see module doc)."""
    from blocks.s3 import S3CheckpointStore, make_s3_client
    from blocks import stores

    store = stores.checkpoint_store()
    if isinstance(store, S3CheckpointStore):
        return store.client()
    return make_s3_client(None, os.environ.get("AWS_DEFAULT_REGION") or "us-east-1", None, None)


class DatasetUnreachable(ConnectionError):
    """An S3 failure that may pass (connection, timeout, server error, an incomplete, corrupted
    or changing download). A ConnectionError, so a segment that meets it ends Crashed and is
    retried (`yoloq.base.retry.is_transient`); `error` is the same one line as a DatasetError, for `analyse`."""

    def __init__(self, problem: str, fix: str) -> None:
        self.error = DatasetError("data", problem, fix)
        super().__init__(self.error.line())


def fetch_error(uri: str, exc: Exception) -> DatasetError | DatasetUnreachable:
    """One clear line for an object that could not be read, naming it and the fix: a
    DatasetError when retrying cannot help (missing, refused), else DatasetUnreachable."""
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    code = str(error.get("Code") or "")
    if code in _MISSING:
        return DatasetError("data", f"{uri} does not exist", "upload it, or fix `data` / the data YAML")
    if code == "NoSuchBucket":
        return DatasetError("data", f"bucket of {uri} does not exist", "create the bucket or fix `data`")
    if code in _DENIED or "Credentials" in type(exc).__name__:
        return DatasetError("data", f"access denied reading {uri} ({code or type(exc).__name__})",
                            _CREDENTIALS_FIX)
    reason = code or f"{type(exc).__name__}: {exc}"
    return DatasetUnreachable(f"cannot read {uri} ({reason})",
                              "check that the S3 endpoint (AWS_ENDPOINT_URL or the checkpoint block) "
                              "is reachable from this node")


def get_bytes(client: Any, obj: S3Uri) -> tuple[bytes, str]:
    """(content, ETag) of a small object."""
    try:
        response = client.get_object(Bucket=obj.bucket, Key=obj.key)
        return response["Body"].read(), str(response.get("ETag", "")).strip('"')
    except (BotoCoreError, ClientError) as exc:
        raise fetch_error(obj.uri, exc) from None


def list_objects(client: Any, root: S3Uri) -> tuple[S3Object, ...]:
    """Every object under `root/`, keys relative to it, sorted by key."""
    prefix = f"{root.key}/" if root.key else ""
    found = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=root.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                relative = item["Key"][len(prefix):]
                if relative and not relative.endswith("/"):  # "folder" marker objects hold nothing
                    found.append(S3Object(relative, int(item["Size"]), str(item["ETag"]).strip('"')))
    except (BotoCoreError, ClientError) as exc:
        raise fetch_error(root.uri + "/", exc) from None
    return tuple(sorted(found, key=lambda o: o.key))


def load_s3_yaml(client: Any, yaml: S3Uri) -> tuple[dict[str, Any], str]:
    """The data YAML as a mapping (same checks and messages as a local one), and its ETag."""
    content, etag = get_bytes(client, yaml)
    with tempfile.TemporaryDirectory(prefix="yoloq-data-") as folder:
        local = Path(folder) / posixpath.basename(yaml.key)
        local.write_bytes(content)
        return load_data_yaml(local), etag


def dataset_root(data: dict[str, Any], yaml: S3Uri) -> tuple[S3Uri, list[str]]:
    """The root prefix of an S3 dataset (see module doc) and any warning about `path`."""
    raw = data.get("path")
    folder = S3Uri(yaml.bucket, posixpath.dirname(yaml.key))
    if raw is not None and not isinstance(raw, str):
        raise DatasetError("data.path", f"must be a string, not {type(raw).__name__}",
                           "write a prefix relative to the data YAML, or an s3:// URI")
    if not raw:
        return folder, []
    if is_s3_uri(raw):
        return parse_s3_uri(raw, "data.path"), []
    if raw.startswith(("/", "~")) or (len(raw) > 1 and raw[1] == ":"):
        return folder, [(f"data.path: {raw} is a local path; the S3 dataset's root is the data "
                         f"YAML's folder {folder.uri}")]
    joined = posixpath.normpath(posixpath.join(folder.key, raw)) if folder.key else posixpath.normpath(raw)
    if joined.startswith(".."):
        raise DatasetError("data.path", f"{raw!r} leads outside the bucket {yaml.bucket}",
                           "give a prefix inside the bucket")
    return S3Uri(yaml.bucket, "" if joined == "." else joined), []


def open_s3_dataset(uri: str, client: Any | None = None) -> S3Dataset:
    """Read the YAML and list the root: everything needed to check or copy the dataset."""
    client = client or dataset_client()
    yaml = parse_s3_uri(uri)
    if not yaml.key.endswith((".yaml", ".yml")):
        raise DatasetError("data", f"{uri} is not a data YAML", "point `data` at s3://bucket/prefix/data.yaml")
    data, etag = load_s3_yaml(client, yaml)
    root, warnings = dataset_root(data, yaml)
    objects = list_objects(client, root)
    if not objects:
        raise DatasetError("data.path", f"no objects under {root.uri}/",
                           "upload the dataset folder there (aws s3 sync DIR s3://...)")
    return S3Dataset(yaml=yaml, yaml_etag=etag, data=data, root=root, objects=objects,
                     warnings=tuple(warnings))

"""Bring an `s3://.../data.yaml` dataset onto this node, through the dataset cache.

The cache folder is named by a SHA-256 over the data YAML's URI and ETag and the sorted
(key, size, ETag) listing of every object under the dataset root: an unchanged dataset maps
to the same folder (no download), any changed, added or removed object to a new one. The
data YAML in that folder has `path:` set to the folder, so ultralytics reads it as is.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from yoloq.datasets.cache import DatasetCache, Lease, default_cache
from yoloq.datasets.download import copy_dataset
from yoloq.datasets.s3_source import (
    S3Dataset,
    dataset_client,
    is_s3_uri,
    open_s3_dataset,
)

log = logging.getLogger("yoloq.datasets")
_HELD: list[Lease] = []  # datasets this process trains on: never evicted while it runs


@dataclass(frozen=True)
class Synced:
    data_yaml: Path  # the local data YAML, `path:` rewritten to `folder`
    folder: Path
    digest: str
    copied: bool  # False: the cache already held it
    lease: Lease  # holds the dataset in use; release() when done with it


def content_digest(dataset: S3Dataset) -> str:
    lines = [f"yaml\t{dataset.yaml.uri}\t{dataset.yaml_etag}\n", f"root\t{dataset.root.uri}\n"]
    lines += [f"{o.key}\t{o.size}\t{o.etag}\n" for o in sorted(dataset.objects, key=lambda o: o.key)]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def local_yaml_name(dataset: S3Dataset) -> str:
    """Where the rewritten YAML goes in the folder: its own place under the root, if it is there."""
    inside = dataset.root.relative(dataset.yaml.key)
    return inside if inside else f".yoloq-{posixpath.basename(dataset.yaml.key)}"


def sync_dataset(uri: str, cache: DatasetCache | None = None, client: Any | None = None,
                 logger: Any = None) -> Synced:
    """Make the dataset available in the node cache and hold it in use (see `Synced.lease`)."""
    client = client or dataset_client()
    return sync_opened(open_s3_dataset(uri, client), cache, client, logger)


def sync_opened(dataset: S3Dataset, cache: DatasetCache | None, client: Any, logger: Any = None) -> Synced:
    """`sync_dataset` for a dataset already read and listed (`open_s3_dataset`)."""
    logger = logger or log
    cache = cache or default_cache(logger)
    for warning in dataset.warnings:
        logger.warning(warning)
    digest = content_digest(dataset)
    final = cache.folder(digest)
    lease = cache.use(digest)
    try:
        folder, copied = cache.ensure(digest, dataset.size, lambda tmp: _fill(client, dataset, tmp, final, logger))
    except BaseException:
        lease.release()
        raise
    return Synced(folder / local_yaml_name(dataset), folder, digest, copied, lease)


def _fill(client: Any, dataset: S3Dataset, tmp: Path, final: Path, logger: Any) -> dict[str, Any]:
    """Copy and verify into `tmp`; write the local YAML; return the manifest."""
    started = time.monotonic()
    kinds = copy_dataset(client, dataset, tmp, logger)
    files = {o.key: o.size for o in dataset.objects}
    name = local_yaml_name(dataset)
    local = tmp / name
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(yaml.safe_dump({**dataset.data, "path": str(final)}, sort_keys=False))
    files[name] = local.stat().st_size
    logger.info("dataset %s: copied and verified in %.1f s into %s", dataset.yaml.uri,
                time.monotonic() - started, final)
    return {"uri": dataset.yaml.uri, "root": dataset.root.uri, "bytes": dataset.size,
            "objects": len(dataset.objects), "verified": kinds, "files": files}


def resolve_dataset(data: str, logger: Any = None) -> Path:
    """The data YAML to train on: an `s3://` dataset's copy in the node cache (held in use until
    this process ends: one process per segment), or a shared-mount path as given.
    A dataset that cannot be fetched raises DatasetError (missing, refused, too big: the
    segment fails) or DatasetUnreachable (endpoint down, broken download: the segment ends
    Crashed and is retried), each naming the object and the fix. There is no fallback."""
    if not is_s3_uri(data):
        return Path(data)
    synced = sync_dataset(str(data), logger=logger)
    _HELD.append(synced.lease)
    (logger or log).info("dataset %s: %s %s", data, "copied to" if synced.copied else "reusing",
                         synced.folder)
    return synced.data_yaml

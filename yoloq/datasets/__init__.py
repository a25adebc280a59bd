"""Datasets every node can read: `data` is a shared-mount path or `s3://bucket/prefix/data.yaml`.

    local_yaml = resolve_dataset(spec.data)   # s3:// -> the node's verified cache; a path -> itself

`s3_source` reads an S3 dataset (its YAML, root and object listing), `s3_analysis` checks it
for `analyse` without downloading images, `cache` is the node's content-addressed,
size-bounded folder of synced datasets, and `sync` fills it.
"""

from __future__ import annotations

from yoloq.datasets.s3_source import is_s3_uri
from yoloq.datasets.sync import resolve_dataset, sync_dataset

__all__ = ["is_s3_uri", "resolve_dataset", "sync_dataset"]

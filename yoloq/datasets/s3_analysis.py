"""`analyse` for an S3 dataset: the same `DatasetInfo` as a local check, without any image.

Images are counted from the object listing; only the data YAML, image lists (`.txt` splits)
and the sampled label files are read. Splits resolve against the root prefix as they do
against a local root, and must lie under it (the node cache copies the root only).
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from yoloq.analysis.dataset import (
    IMG_FORMATS,
    LABEL_SCAN_LIMIT,
    DatasetInfo,
    SplitInfo,
    check_names,
)
from yoloq.analysis.dataset import label_format
from yoloq.analysis.labels import LabelFormat, sample, scan_labels
from yoloq.datasets.s3_source import (
    DatasetUnreachable,
    S3Dataset,
    dataset_client,
    get_bytes,
    open_s3_dataset,
)
from yoloq.base.errors import DatasetError

_READERS = 8  # label files fetched at once (botocore keeps 10 connections per client)


class _S3Label:
    """What `scan_labels` needs of a label file: its text, or FileNotFoundError."""

    def __init__(self, key: str, texts: dict[str, bytes]) -> None:
        self.key, self._texts = key, texts

    def read_text(self, encoding: str = "utf-8") -> str:
        if self.key not in self._texts:
            raise FileNotFoundError(self.key)
        return self._texts[self.key].decode(encoding)

    def relative_to(self, _root: Any) -> str:
        return self.key


def label_key(image: str) -> str:
    """ultralytics' img2label_paths on a root-relative key: the last /images/ becomes /labels/."""
    swapped = "/labels/".join(f"/{image}".rsplit("/images/", 1))[1:]
    return swapped.rsplit(".", 1)[0] + ".txt"


def validate_s3_dataset(uri: str, limit: int = LABEL_SCAN_LIMIT, task: str = "detect",
                        client: Any | None = None) -> DatasetInfo:
    """Check an `s3://.../data.yaml` dataset like `validate_dataset` checks a local one (for a
    `task` model). Every problem, an unreachable endpoint included, is one DatasetError line."""
    if task == "classify":
        raise DatasetError("data", f"{uri}: classification datasets (class folders) are read from a local "
                           "folder; yoloq does not sync them from S3 yet",
                           "give the dataset's folder on a path every node sees (docs/concepts/tasks.md)")
    try:
        return _validate(uri, limit, client or dataset_client(), task)
    except DatasetUnreachable as exc:
        raise exc.error from None


def _validate(uri: str, limit: int, client: Any, task: str = "detect") -> DatasetInfo:
    dataset = open_s3_dataset(uri, client)
    names = check_names(dataset.data)
    fmt = label_format(task, dataset.data)
    warnings = list(dataset.warnings)
    splits: dict[str, SplitInfo] = {}
    for key in ("train", "val", "test"):
        if key == "test" and not dataset.data.get("test"):
            continue
        sources = split_sources(dataset, key)
        splits[key] = _check_split(client, dataset, key, sources, len(names), limit, warnings, fmt)
    return DatasetInfo(yaml_path=dataset.yaml.uri, root=dataset.root.uri, names=names, splits=splits,
                       warnings=tuple(warnings))


def split_sources(dataset: S3Dataset, key: str) -> list[str]:
    """The split's folders or `.txt` lists as root-relative keys; each must exist."""
    value = dataset.data.get(key)
    if isinstance(value, str):
        entries = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        entries = value
    else:
        raise DatasetError(f"data.{key}", "missing" if value is None else "must be a path or a list of paths",
                           f"add `{key}: images/{key}` (relative to `path`)")
    sources = []
    for entry in entries:
        relative = posixpath.normpath(entry.strip("/"))
        if relative.startswith(".."):
            raise DatasetError(f"data.{key}", f"{entry} lies outside the dataset root {dataset.root.uri}",
                               "keep every split under `path`: nodes copy that prefix only")
        if relative not in dataset.keys and not dataset.under(relative):
            raise DatasetError(f"data.{key}", f"not found: {dataset.root.child(relative).uri}",
                               f"upload it, or fix `{key}` (it is relative to {dataset.root.uri})")
        sources.append(relative)
    return sources


def list_split_images(client: Any, dataset: S3Dataset, key: str, sources: list[str]) -> list[str]:
    """Root-relative image keys of a split: listed under folders, or named by `.txt` lists."""
    found: list[str] = []
    for source in sources:
        if source in dataset.keys:  # an image list
            found += _read_list(client, dataset, key, source)
        else:
            found += dataset.under(source)
    images = sorted(f for f in found if f.rpartition(".")[-1].lower() in IMG_FORMATS)
    if not images:
        where = ", ".join(dataset.root.child(s).uri for s in sources)
        raise DatasetError(f"data.{key}", f"no images in {where}",
                           "upload image files (bmp, jpg, png, webp, ...) there")
    return images


def _read_list(client: Any, dataset: S3Dataset, key: str, source: str) -> list[str]:
    content, _ = get_bytes(client, dataset.root.child(source))
    try:
        lines = [line.strip() for line in content.decode("utf-8-sig").strip().splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise DatasetError(f"data.{key}", f"image list {source} is not UTF-8 text",
                           "give a folder or a UTF-8 .txt list of images") from None
    folder = posixpath.dirname(source)
    images = []
    for line in lines:
        if not line.startswith("./"):
            raise DatasetError(f"data.{key}", f"{source}: {line!r} is not relative to the list",
                               "write each image of an S3 image list as ./images/name.jpg")
        images.append(posixpath.normpath(posixpath.join(folder, line[2:])))
    missing = [image for image in images if image not in dataset.keys]
    if missing:
        raise DatasetError(f"data.{key}", f"{len(missing)} listed images do not exist (e.g. "
                           f"{dataset.root.child(missing[0]).uri})",
                           "fix the image list so every line is an existing object")
    return images


def _fetch_labels(client: Any, dataset: S3Dataset, images: list[str]) -> dict[str, bytes]:
    """The label files of `images` that exist, read concurrently (small objects)."""
    wanted = sorted({label_key(image) for image in images} & dataset.keys)
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        contents = pool.map(lambda k: get_bytes(client, dataset.root.child(k))[0], wanted)
        return dict(zip(wanted, contents))


def _check_split(client: Any, dataset: S3Dataset, key: str, sources: list[str], nc: int, limit: int,
                 warnings: list[str], fmt: LabelFormat = LabelFormat()) -> SplitInfo:
    images = list_split_images(client, dataset, key, sources)
    checked = sample(images, limit)
    texts = _fetch_labels(client, dataset, checked)
    scan = scan_labels(checked, lambda image: _S3Label(label_key(image), texts), nc, dataset.root, fmt)
    if len(checked) < len(images):
        warnings.append(f"data.{key}: checked the labels of {len(checked)} of {len(images)} images "
                        f"(an even sample; the rest were not read)")
    if scan.labelled == 0 and key == "train":
        raise DatasetError(f"data.{key}", f"no label files found for {len(checked)} images "
                           f"(looked in the labels/ mirror of images/, e.g. "
                           f"{dataset.root.child(label_key(checked[0])).uri})",
                           "put one .txt per image under labels/, mirroring images/")
    if scan.labelled < scan.checked:
        warnings.append(f"data.{key}: {scan.checked - scan.labelled} of {scan.checked} images have no "
                        "label file (trained as background)")
    return SplitInfo(name=key, sources=tuple(dataset.root.child(s).uri for s in sources), images=len(images),
                     labelled=scan.labelled, checked=scan.checked, boxes=scan.boxes)

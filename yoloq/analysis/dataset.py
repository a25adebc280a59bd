"""Dataset validation for a detection data YAML, without ultralytics.

Paths resolve like ultralytics' `check_det_dataset`: `train`/`val`/`test` are
relative to `path`; a relative `path` is taken from the data YAML's folder (a
missing `path` means that folder). Note that ultralytics itself resolves a
relative `path` from the current directory, so yoloq hands training a copy of
the YAML with `path` made absolute (`DatasetInfo.resolved_data()`).

Labels are YOLO rows `cls cx cy w h` (or polygon rows `cls x1 y1 x2 y2 ...`,
which ultralytics turns into boxes) in the `labels/` mirror of `images/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from yoloq.analysis.labels import sample, scan_labels
from yoloq.errors import DatasetError

IMG_FORMATS = frozenset({"avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif",
                         "tiff", "webp"})  # ultralytics.data.utils.IMG_FORMATS
LABEL_SCAN_LIMIT = 5000  # label files checked per split; above this an even sample is checked


@dataclass(frozen=True)
class SplitInfo:
    name: str
    sources: tuple[str, ...]
    images: int
    labelled: int  # label files found among those checked
    checked: int  # label files checked (all, or a sample above LABEL_SCAN_LIMIT)
    boxes: int


@dataclass(frozen=True)
class DatasetInfo:
    yaml_path: str
    root: str
    names: tuple[str, ...]
    splits: dict[str, SplitInfo]
    warnings: tuple[str, ...] = field(default=())

    @property
    def nc(self) -> int:
        return len(self.names)

    def images(self, split: str) -> int:
        return self.splits[split].images if split in self.splits else 0

    def resolved_data(self) -> dict[str, Any]:
        """The data YAML as ultralytics should get it: absolute paths, names as a list."""
        data: dict[str, Any] = {"path": self.root, "nc": self.nc, "names": list(self.names)}
        for name, split in self.splits.items():
            data[name] = list(split.sources) if len(split.sources) > 1 else split.sources[0]
        return data


def load_data_yaml(path: str | Path) -> dict[str, Any]:
    """Read the data YAML; every problem is a DatasetError naming `data`."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError("data", f"dataset YAML not found: {path}", "point `data` at an existing data YAML")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise DatasetError("data", f"{path.name} is not valid YAML{where}", "fix the YAML syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError("data", f"cannot read {path.name}: {exc}", "make it a readable UTF-8 file") from None
    if not isinstance(raw, dict):
        raise DatasetError("data", f"{path.name} must be a mapping with path, train, val and names",
                           "see the ultralytics detection dataset format")
    return raw


def check_names(data: dict[str, Any]) -> tuple[str, ...]:
    """`names` as a tuple; it must exist and agree with `nc` (list or {index: name} form)."""
    names = data.get("names")
    if names is None:
        raise DatasetError("data.names", "missing", "add `names:` with one name per class")
    if isinstance(names, dict):
        try:
            keyed = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            raise DatasetError("data.names", "keys must be class indices 0, 1, ...",
                               "write `names: {0: cat, 1: dog}` or a list") from None
        if sorted(keyed) != list(range(len(keyed))):
            raise DatasetError("data.names", f"indices must be 0-{len(keyed) - 1} without gaps",
                               "number the classes from 0")
        names = [keyed[i] for i in range(len(keyed))]
    if not isinstance(names, list):
        raise DatasetError("data.names", f"must be a list or a mapping, not {type(names).__name__}",
                           "write `names: [cat, dog]`")
    if not names:
        raise DatasetError("data.names", "is empty", "give at least one class name")
    nc = data.get("nc")
    if nc is not None:
        if isinstance(nc, bool) or not isinstance(nc, int):
            raise DatasetError("data.nc", f"must be an integer, not {nc!r}", "write the number of classes")
        if nc != len(names):
            raise DatasetError("data.names", f"{len(names)} names but nc is {nc}",
                               "make nc match the names list")
    return tuple(str(n) for n in names)


def resolve_root(data: dict[str, Any], yaml_path: Path) -> Path:
    raw = data.get("path")
    if raw is not None and not isinstance(raw, str):
        raise DatasetError("data.path", f"must be a string, not {type(raw).__name__}", "write a folder path")
    root = Path(raw).expanduser() if raw else yaml_path.parent
    if not root.is_absolute():
        root = yaml_path.parent / root
    root = root.resolve()
    if not root.is_dir():
        raise DatasetError("data.path", f"folder not found: {root}",
                           "set `path` to the dataset folder (relative to the data YAML, or absolute)")
    return root


def resolve_split(data: dict[str, Any], key: str, root: Path) -> list[Path]:
    """The split's sources (folders or .txt lists) as absolute paths; each must exist."""
    value = data.get(key)
    if isinstance(value, str):
        entries = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        entries = value
    else:
        raise DatasetError(f"data.{key}", "missing" if value is None else f"must be a path or a list of paths",
                           f"add `{key}: images/{key}` (relative to `path`)")
    resolved = []
    for entry in entries:
        target = (root / entry).resolve()
        if not target.exists() and entry.startswith("../"):
            target = (root / entry[3:]).resolve()  # ultralytics' fallback
        if not target.exists():
            raise DatasetError(f"data.{key}", f"not found: {target}",
                               f"create it, or fix `{key}` (it is relative to {root})")
        resolved.append(target)
    return resolved


def list_images(key: str, sources: list[Path]) -> list[str]:
    """Image files under folders (recursive) and in .txt lists, as ultralytics finds them."""
    found: list[str] = []
    for source in sources:
        if source.is_dir():
            found += [str(p) for p in source.rglob("*.*") if p.is_file()]
        else:
            found += _read_list(key, source)
    images = sorted(f for f in found if f.rpartition(".")[-1].lower() in IMG_FORMATS)
    if not images:
        where = ", ".join(str(s) for s in sources)
        raise DatasetError(f"data.{key}", f"no images in {where}",
                           f"put image files ({', '.join(sorted(('jpg', 'png', 'bmp', 'webp')))}, ...) there")
    return images


def _read_list(key: str, path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8-sig").strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"data.{key}", f"cannot read image list {path}: {exc}",
                           "give a folder or a UTF-8 .txt list of images") from None
    parent = str(path.parent) + os.sep
    return [line.replace("./", parent, 1) if line.startswith("./") else line for line in map(str.strip, lines)
            if line]


def label_path(image: str) -> Path:
    """ultralytics' img2label_paths: the last /images/ becomes /labels/, suffix .txt."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return Path(sb.join(image.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt")


def validate_dataset(data_yaml: str | Path, limit: int = LABEL_SCAN_LIMIT) -> DatasetInfo:
    """Check a detection data YAML, its image folders and label files; raise DatasetError."""
    if str(data_yaml).startswith("s3://"):  # listed and labels read in S3, images not downloaded
        from yoloq.datasets.s3_analysis import validate_s3_dataset

        return validate_s3_dataset(str(data_yaml), limit)
    yaml_path = Path(data_yaml).expanduser().resolve()
    data = load_data_yaml(yaml_path)
    names = check_names(data)
    root = resolve_root(data, yaml_path)
    warnings: list[str] = []
    splits: dict[str, SplitInfo] = {}
    for key in ("train", "val", "test"):
        if key == "test" and not data.get("test"):
            continue
        sources = resolve_split(data, key, root)
        splits[key] = _check_split(key, sources, names, root, limit, warnings)
    return DatasetInfo(yaml_path=str(yaml_path), root=str(root), names=names, splits=splits,
                       warnings=tuple(warnings))


def _check_split(key: str, sources: list[Path], names: tuple[str, ...], root: Path, limit: int,
                 warnings: list[str]) -> SplitInfo:
    images = list_images(key, sources)
    checked = sample(images, limit)
    if any(source.is_file() for source in sources):  # image lists may name files that are gone
        missing = [image for image in checked if not os.path.isfile(image)]
        if missing:
            raise DatasetError(f"data.{key}", f"{len(missing)} listed images do not exist (e.g. {missing[0]})",
                               "fix the image list so every line is an existing file")
    scan = scan_labels(checked, label_path, len(names), root)
    if len(checked) < len(images):
        warnings.append(f"data.{key}: checked the labels of {len(checked)} of {len(images)} images "
                        f"(an even sample; the rest were not read)")
    if scan.labelled == 0 and key == "train":
        raise DatasetError(f"data.{key}", f"no label files found for {len(checked)} images "
                           f"(looked in the labels/ mirror of images/, e.g. {label_path(checked[0])})",
                           "put one .txt per image under labels/, mirroring images/")
    if scan.labelled < scan.checked:
        warnings.append(f"data.{key}: {scan.checked - scan.labelled} of {scan.checked} images have no "
                        "label file (trained as background)")
    return SplitInfo(name=key, sources=tuple(str(s) for s in sources), images=len(images),
                     labelled=scan.labelled, checked=scan.checked, boxes=scan.boxes)

"""The files of a dataset, read as ultralytics finds them: image suffixes, folder walks that
follow links without looping, one-line errors for paths that cannot be looked at, and the
summary the analysis keeps (`DatasetInfo`). Shared by every task's dataset check."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yoloq.base.errors import DatasetError

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


def no_loop(field_name: str, path: Path) -> None:
    """A one-line error for a path that cannot even be looked at: a symlink loop (elsewhere a
    RuntimeError or a hang), a name too long, no permission. A missing path passes (callers say so)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DatasetError(field_name, f"symlink loop at {path}", "fix or remove the link") from None
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise DatasetError(field_name, f"cannot access {str(path)[:200]}: {exc.strerror}",
                               "give a path this user can read") from None


def resolved_path(field_name: str, path: Path) -> Path:
    no_loop(field_name, path)
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise DatasetError(field_name, f"symlink loop at {path}", "fix or remove the link") from None


def walk_files(key: str, top: str) -> list[str]:
    """Files named `*.*` under `top`, following symlinked folders like ultralytics' recursive glob
    (hidden names skipped, as glob does); a link leading back to a folder above is an error."""
    found: list[str] = []
    pending: list[tuple[str, frozenset[str]]] = [(top, frozenset())]
    while pending:
        folder, above = pending.pop()
        real = os.path.realpath(folder)
        if real in above:
            raise DatasetError(f"data.{key}", f"symlink loop: {folder} leads back to {real}",
                               "remove the link or point it outside the dataset folder")
        for entry in _scan(key, folder):
            if entry.name.startswith("."):
                continue
            if _is_dir(key, entry):
                pending.append((entry.path, above | {real}))
            elif "." in entry.name and entry.is_file():
                found.append(entry.path)
    return found


def _scan(key: str, folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        raise DatasetError(f"data.{key}", f"cannot read folder {folder}: {exc.strerror}",
                           "make it readable") from None


def _is_dir(key: str, entry: os.DirEntry) -> bool:
    if entry.is_symlink():
        no_loop(f"data.{key}", Path(entry.path))
    return entry.is_dir()

"""The node's dataset cache: `<scratch>/datasets/<content hash>/`, verified, shared, bounded.

- **Content-addressed.** A folder is named by the hash of what was copied into it, so an
  unchanged dataset maps to the same folder for every segment and job on the node.
- **Never partial.** A copy is filled in `.tmp-<hash>-*`, verified, given its manifest, then
  renamed into place (atomic). A folder whose files no longer match its manifest is not used.
- **One copy at a time.** `.locks/<hash>.fill` (an exclusive flock) makes a second segment
  wait for the first one's copy instead of copying the same dataset again.
- **Never evicted in use.** A user holds a shared flock on `.locks/<hash>.use` while it trains;
  eviction takes it exclusively without waiting, so a dataset in use is skipped. flocks end
  with their process, so a killed segment leaves no stale lock.
- **Bounded.** Before a copy, least-recently-used datasets are evicted until the new one fits
  in `YOLOQ_DATASET_CACHE_GB` (default 50). If only datasets in use are left, the copy goes
  ahead over the bound with a warning; a dataset larger than the bound is an error.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoloq.base.errors import DatasetError
from yoloq.base.paths import state_paths
from yoloq.settings import settings

CACHE_GB_ENV = "YOLOQ_DATASET_CACHE_GB"
DEFAULT_CACHE_GB = 50.0
MANIFEST = ".yoloq-dataset.json"
LAST_USED = ".yoloq-last-used"
_EXPECTED = ".yoloq-expected-bytes"
_TMP, _TRASH = ".tmp-", ".trash-"
GB = 1024 ** 3

log = logging.getLogger("yoloq.datasets")


def cache_limit_bytes() -> int:
    """`YOLOQ_DATASET_CACHE_GB` (a positive number of GiB) in bytes."""
    return int(settings().dataset_cache_gb * GB)


def default_cache(logger: Any = None) -> DatasetCache:
    """`<scratch>/datasets`, bounded by `YOLOQ_DATASET_CACHE_GB`."""
    return DatasetCache(state_paths().scratch / "datasets", cache_limit_bytes(), logger)


@dataclass(frozen=True)
class Entry:
    digest: str
    path: Path
    bytes: int
    last_used: float


class Lease:
    """A shared hold on one dataset: it cannot be evicted until `release()` or process exit."""

    def __init__(self, fd: int, digest: str) -> None:
        self._fd: int | None = fd
        self.digest = digest

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class DatasetCache:
    def __init__(self, root: Path, max_bytes: int, logger: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.log = logger or log
        self.clock = clock
        (self.root / ".locks").mkdir(parents=True, exist_ok=True)

    def folder(self, digest: str) -> Path:
        return self.root / digest

    # ------------------------------------------------------------------ using

    def use(self, digest: str) -> Lease:
        """Hold `digest` in use (blocks only while an eviction of it is in progress)."""
        fd = self._open_lock(f"{digest}.use")
        fcntl.flock(fd, fcntl.LOCK_SH)
        return Lease(fd, digest)

    def lookup(self, digest: str) -> Path | None:
        """The complete, intact folder for `digest` (and mark it used), or None."""
        folder = self.folder(digest)
        manifest = read_manifest(folder)
        if manifest is None or self._damage(folder, manifest):
            return None
        (folder / LAST_USED).write_text(f"{self.clock()!r}\n")
        return folder

    def ensure(self, digest: str, size: int, fill: Callable[[Path], dict[str, Any]]) -> tuple[Path, bool]:
        """The folder for `digest`, filling it with `fill(tmp) -> manifest` if needed.
        Returns (folder, copied). The caller holds `use(digest)`."""
        found = self.lookup(digest)
        if found is not None:
            return found, False
        with self._lock(f"{digest}.fill", wait_message=f"waiting for another copy of dataset {digest[:12]}"):
            found = self.lookup(digest)
            if found is not None:
                return found, False
            self._discard_damaged(digest)
            self._discard_partial(digest)
            tmp = self._reserve(digest, size)
            try:
                manifest = fill(tmp)
                (tmp / MANIFEST).write_text(json.dumps({**manifest, "digest": digest}, indent=1))
                (tmp / LAST_USED).write_text(f"{self.clock()!r}\n")
                (tmp / _EXPECTED).unlink(missing_ok=True)
                os.rename(tmp, self.folder(digest))
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return self.folder(digest), True

    # ------------------------------------------------------------------ bounding

    def entries(self) -> list[Entry]:
        """Complete datasets in the cache, least recently used first."""
        found = []
        for folder in self.root.iterdir():
            manifest = read_manifest(folder) if not folder.name.startswith(".") else None
            if manifest is not None:
                found.append(Entry(folder.name, folder, int(manifest.get("bytes", 0)), _last_used(folder)))
        return sorted(found, key=lambda e: (e.last_used, e.digest))

    def in_use(self, digest: str) -> bool:
        with self._try_exclusive(f"{digest}.use") as free:
            return not free

    def evict(self, digest: str) -> bool:
        """Remove one dataset unless it is in use; True when it went."""
        with self._try_exclusive(f"{digest}.use") as free:
            if not free or not self.folder(digest).exists():
                return False
            trash = self.root / f"{_TRASH}{digest}-{uuid.uuid4().hex[:8]}"
            os.rename(self.folder(digest), trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def make_room(self, needed: int) -> list[str]:
        """Evict least-recently-used datasets not in use until `needed` more bytes fit."""
        self._sweep()
        entries = self.entries()
        total = sum(e.bytes for e in entries) + self._reserved()
        evicted = []
        for entry in entries:
            if total + needed <= self.max_bytes:
                break
            if self.evict(entry.digest):
                evicted.append(entry.digest)
                total -= entry.bytes
                self.log.info("dataset cache: evicted %s (%.1f MB, least recently used)",
                              entry.digest[:12], entry.bytes / 1e6)
        if total + needed > self.max_bytes:
            self.log.warning("dataset cache: %.2f GB with this dataset, over its %.2f GB bound "
                             "(%s): the rest is in use by running segments", (total + needed) / GB,
                             self.max_bytes / GB, CACHE_GB_ENV)
        return evicted

    def _reserve(self, digest: str, size: int) -> Path:
        """Make room and create the temp folder for a copy, under the cache-wide lock."""
        if size > self.max_bytes:
            raise DatasetError("data", f"dataset is {size / GB:.2f} GB, more than the node's dataset "
                               f"cache ({self.max_bytes / GB:.2f} GB)",
                               f"raise {CACHE_GB_ENV}, or put the dataset on a shared mount")
        with self._lock("cache"):
            self.make_room(size)
            tmp = self.root / f"{_TMP}{digest}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            (tmp / _EXPECTED).write_text(str(size))
        return tmp

    def _reserved(self) -> int:
        """Bytes promised to copies in progress (their temp folders)."""
        total = 0
        for tmp in self.root.glob(f"{_TMP}*"):
            try:
                total += int((tmp / _EXPECTED).read_text())
            except (OSError, ValueError):
                continue
        return total

    def _sweep(self) -> None:
        """Remove trash and the temp folders of copies that died (their fill lock is free)."""
        for path in self.root.glob(f"{_TRASH}*"):
            shutil.rmtree(path, ignore_errors=True)
        for tmp in self.root.glob(f"{_TMP}*"):
            digest = tmp.name[len(_TMP):].rsplit("-", 1)[0]
            with self._try_exclusive(f"{digest}.fill") as free:
                if free:
                    self.log.info("dataset cache: removing the partial copy %s", tmp.name)
                    shutil.rmtree(tmp, ignore_errors=True)

    def _damage(self, folder: Path, manifest: dict[str, Any]) -> str | None:
        """Why a cached folder cannot be used (a file missing or of the wrong size), or None."""
        for name, size in manifest.get("files", {}).items():
            try:
                actual = (folder / name).stat().st_size
            except OSError:
                return f"{name} is missing"
            if actual != size:
                return f"{name} has {actual} bytes, expected {size}"
        return None

    def _discard_partial(self, digest: str) -> None:
        """Temp folders of `digest` left by a copy that died (the caller holds its fill lock)."""
        for tmp in self.root.glob(f"{_TMP}{digest}-*"):
            self.log.info("dataset cache: removing the partial copy %s", tmp.name)
            shutil.rmtree(tmp, ignore_errors=True)

    def _discard_damaged(self, digest: str) -> None:
        folder = self.folder(digest)
        if not folder.exists():
            return
        manifest = read_manifest(folder)
        reason = "no manifest" if manifest is None else self._damage(folder, manifest)
        self.log.warning("dataset cache: %s is damaged (%s); copying it again", digest[:12], reason)
        trash = self.root / f"{_TRASH}{digest}-{uuid.uuid4().hex[:8]}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ locks

    def _open_lock(self, name: str) -> int:
        return os.open(self.root / ".locks" / name, os.O_RDWR | os.O_CREAT, 0o644)

    @contextmanager
    def _lock(self, name: str, wait_message: str | None = None) -> Iterator[None]:
        fd = self._open_lock(name)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if wait_message:
                    self.log.info("dataset cache: %s", wait_message)
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def _try_exclusive(self, name: str) -> Iterator[bool]:
        fd = self._open_lock(name)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _last_used(folder: Path) -> float:
    try:
        return float((folder / LAST_USED).read_text())
    except (OSError, ValueError):
        return 0.0

"""The checkpoint store contract, shared by the local-folder and S3 stores.

A checkpoint is two objects under `<job_id>/`: the data
(`epoch-000012-<sha256[:12]>.pt`) and, written strictly after it, the metadata
(`epoch-000012.json`: epoch, sha256, size, data key, `finished`, and the job's epoch
ledger `trainings`: one row per epoch trained, carried forward from checkpoint to
checkpoint, so a retrained epoch shows as two rows). Readers only trust metadata,
so a checkpoint whose data is still being written (or whose writer died) is
invisible, and a stored file that no longer matches its sha256 is skipped with a
warning in favour of the previous one. Keys sort by epoch (zero-padded).

Backends implement five primitive operations on keys relative to the store root;
everything else (hashing, ordering, pruning, verified restore) lives here.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import re
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from prefect.blocks.core import Block
from pydantic import Field

from yoloq.settings import settings

logger = logging.getLogger("yoloq.checkpoints")

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DATA_NAME = re.compile(r"^epoch-(\d{6,})-[0-9a-f]{12}\.pt$")
_META_NAME = re.compile(r"^epoch-(\d{6,})\.json$")
_CHUNK = 1024 * 1024
RETRY_ENV = "YOLOQ_STORE_RETRY_S"
DEFAULT_RETRY_S = 120.0


def store_retry_limit_s() -> float:
    """How long a checkpoint save is retried before the segment gives up (the documented limit)."""
    return settings().store_retry_s


class MissingObject(Exception):
    """A backend found no object under the key (deleted or never written)."""


@dataclass(frozen=True)
class EpochRecord:
    """One training of one epoch: the epoch ledger's row. A repeat shows as two rows."""

    job_id: str
    epoch: int  # 1-based: the epoch that ended
    segment: str  # the segment's flow run id (or "local")
    node: str  # YOLOQ_NODE_NAME, else the hostname
    start: str  # ISO 8601, UTC
    end: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EpochRecord":
        return cls(job_id=str(data["job_id"]), epoch=int(data["epoch"]),
                   segment=str(data["segment"]), node=str(data["node"]),
                   start=str(data["start"]), end=str(data["end"]))


@dataclass(frozen=True)
class CheckpointInfo:
    job_id: str
    epoch: int
    sha256: str
    size: int
    key: str  # data object key, relative to the store root
    created_at: str  # ISO 8601, UTC
    finished: bool = False  # all epochs trained (or early-stopped): evaluate/export may remain
    trainings: tuple[EpochRecord, ...] = ()  # the job's epoch ledger up to this checkpoint
    target_epochs: int = 0  # the job's total when this was written (0: not recorded)

    def done_for(self, epochs: int) -> bool:
        """Nothing is left to train for a job of `epochs` epochs: finished, unless it finished
        by reaching a smaller total that `yoloq extend` has since raised (an early-stopped
        checkpoint stays done: the stopper would stop again at once)."""
        return self.finished and not self.extended_to(epochs)

    def extended_to(self, epochs: int) -> bool:
        """A finished checkpoint that reached its total, for a job now asking for more."""
        return self.finished and 0 < self.target_epochs <= self.epoch < epochs

    def to_json(self) -> bytes:
        data = asdict(self)
        data["trainings"] = [asdict(t) for t in self.trainings]
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "CheckpointInfo":
        data = json.loads(raw)
        return cls(job_id=str(data["job_id"]), epoch=int(data["epoch"]), sha256=str(data["sha256"]),
                   size=int(data["size"]), key=str(data["key"]), created_at=str(data["created_at"]),
                   finished=bool(data.get("finished", False)),
                   trainings=tuple(EpochRecord.from_dict(t) for t in data.get("trainings") or ()),
                   target_epochs=int(data.get("target_epochs") or 0))


@dataclass(frozen=True)
class RestoredCheckpoint:
    info: CheckpointInfo
    path: Path
    warnings: list[str] = field(default_factory=builtins.list)
    skipped: list[int] = field(default_factory=builtins.list)  # newer epochs found unusable


def metadata_key(job_id: str, epoch: int) -> str:
    return f"{job_id}/epoch-{epoch:06d}.json"


def data_key(job_id: str, epoch: int, sha256: str) -> str:
    return f"{job_id}/epoch-{epoch:06d}-{sha256[:12]}.pt"


def file_sha256(path: Path) -> tuple[str, int]:
    """(hex sha256, size in bytes) of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ValueError(f"job_id {job_id!r} is not a safe key (letters, digits, . _ -; no slashes)")
    return job_id


def _warn(warnings: builtins.list[str], message: str) -> None:
    logger.warning(message)
    warnings.append(message)


class CheckpointStore(Block, ABC):
    """Where training checkpoints live between segments; the last `keep` per job are kept."""

    _block_type_name = "yoloq Checkpoint Store"

    keep: int = Field(default=3, ge=1, description="How many of the newest checkpoints to keep per job.")

    # ---- the primitive operations a backend provides (keys are relative to the root)

    @abstractmethod
    def _put_file(self, key: str, path: Path) -> None:
        """Store a file under `key` atomically: readers see all of it or nothing."""

    @abstractmethod
    def _put_bytes(self, key: str, data: bytes) -> None:
        """Store a small object under `key` atomically."""

    @abstractmethod
    def _get_bytes(self, key: str) -> bytes:
        """Read a small object; raise MissingObject if absent."""

    @abstractmethod
    def _download(self, key: str, dest: Path) -> None:
        """Copy an object into the file `dest`; raise MissingObject if absent."""

    @abstractmethod
    def _list_keys(self, job_id: str) -> builtins.list[str]:
        """Every key under `<job_id>/`, in no particular order."""

    @abstractmethod
    def _delete_keys(self, keys: Iterable[str]) -> None:
        """Delete keys; absent ones are not an error."""

    def location(self) -> str:
        """A URI for logs and docs (`file:///...`, `s3://bucket/prefix`)."""
        return type(self).__name__

    # ---- `CheckpointStore.load(name)` finds a saved document of any concrete store.
    # Prefect looks documents up by the calling class's slug; the interface has no
    # documents of its own, so it asks each concrete store in turn. These are private
    # Prefect hooks (prefect is pinned to one minor line): test them against a server.

    @classmethod
    def _concrete_stores(cls) -> builtins.list[type["CheckpointStore"]]:
        found, pending = [], builtins.list(cls.__subclasses__())
        while pending:
            sub = pending.pop(0)
            pending.extend(sub.__subclasses__())
            if ABC not in sub.__bases__:
                found.append(sub)
        return found

    @classmethod
    def _get_block_document(cls, name: str, client: Any) -> Any:
        if cls is not CheckpointStore:
            return super()._get_block_document(name, client)
        for store in cls._concrete_stores():
            try:
                return store._get_block_document(name, client)
            except ValueError:
                continue
        raise ValueError(f"Unable to find a checkpoint store block document named {name}")

    @classmethod
    async def _aget_block_document(cls, name: str, client: Any) -> Any:
        if cls is not CheckpointStore:
            return await super()._aget_block_document(name, client)
        for store in cls._concrete_stores():
            try:
                return await store._aget_block_document(name, client)
            except ValueError:
                continue
        raise ValueError(f"Unable to find a checkpoint store block document named {name}")

    @classmethod
    def _from_block_document(cls, block_document: Any) -> Any:
        if cls is CheckpointStore and block_document.block_type is not None:
            for store in cls._concrete_stores():
                if store.get_block_type_slug() == block_document.block_type.slug:
                    return store._from_block_document(block_document)
        return super()._from_block_document(block_document)

    # ---- the public interface

    def save(self, job_id: Any = None, epoch: int | None = None, path: Path | str | None = None,
             **block_kwargs: Any) -> Any:
        """Save `path` as the checkpoint of `job_id` at `epoch` and prune to `keep`.

        Called as `save(name, overwrite=...)` (no epoch and path) it is Prefect's
        `Block.save`, which stores this block's configuration as a block document.
        """
        if epoch is None and path is None:
            return Block.save(self, job_id, **block_kwargs)
        if block_kwargs or epoch is None or path is None:
            raise TypeError("save(job_id, epoch, path) needs all three and nothing else")
        return self.save_checkpoint(job_id, epoch, Path(path))

    def save_checkpoint(self, job_id: str, epoch: int, path: Path, *, finished: bool = False,
                        trainings: Iterable[EpochRecord] = (), target_epochs: int = 0) -> CheckpointInfo:
        """Data first, metadata after it: a reader never sees a partial checkpoint."""
        check_job_id(job_id)
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        sha256, size = file_sha256(Path(path))
        info = CheckpointInfo(job_id=job_id, epoch=epoch, sha256=sha256, size=size,
                              key=data_key(job_id, epoch, sha256),
                              created_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                              finished=finished, trainings=tuple(trainings),
                              target_epochs=target_epochs)
        self._put_file(info.key, Path(path))
        self._put_bytes(metadata_key(job_id, epoch), info.to_json())
        self.prune(job_id)
        return info

    def save_retrying(self, job_id: str, epoch: int, path: Path, *, finished: bool = False,
                      trainings: Iterable[EpochRecord] = (), target_epochs: int = 0,
                      limit_s: float | None = None) -> CheckpointInfo:
        """`save_checkpoint`, retried with exponential backoff (1 s, 2 s, 4 s ... at most 10 s
        apart) for up to `limit_s` seconds (default: `YOLOQ_STORE_RETRY_S`, else 120 s).
        Each attempt rewrites the whole checkpoint (data keys are content-addressed); past
        the limit the last error is raised."""
        trainings = tuple(trainings)
        limit = store_retry_limit_s() if limit_s is None else limit_s
        deadline, delay, attempt = time.monotonic() + limit, 1.0, 1
        while True:
            try:
                return self.save_checkpoint(job_id, epoch, path, finished=finished,
                                            trainings=trainings, target_epochs=target_epochs)
            except (ValueError, TypeError):
                raise  # a wrong call, not a fault of the store
            except Exception as exc:
                if time.monotonic() + delay > deadline:
                    raise
                logger.warning("saving checkpoint %s epoch %d to %s failed (attempt %d: %s: %s); "
                               "retrying in %.0f s", job_id, epoch, self.location(), attempt,
                               exc.__class__.__name__, str(exc).splitlines()[0][:200] if str(exc)
                               else "", delay)
                time.sleep(delay)
                delay, attempt = min(delay * 2, 10.0), attempt + 1

    def list(self, job_id: str) -> builtins.list[CheckpointInfo]:
        """Checkpoints with readable metadata, oldest to newest by epoch."""
        check_job_id(job_id)
        infos = []
        for key in self._list_keys(job_id):
            match = _META_NAME.match(key.rpartition("/")[2])
            if match:
                info = self._read_metadata(job_id, key, int(match.group(1)))
                if info is not None:
                    infos.append(info)
        return sorted(infos, key=lambda info: info.epoch)

    def latest(self, job_id: str) -> CheckpointInfo | None:
        infos = self.list(job_id)
        return infos[-1] if infos else None

    def restore(self, job_id: str, dest_dir: Path | str,
                filename: str | None = None) -> RestoredCheckpoint | None:
        """Download the newest checkpoint whose sha256 verifies into `dest_dir`.

        A corrupt, truncated or missing newest checkpoint is skipped with a warning
        (logged and returned) in favour of the one before it. None: nothing usable.
        """
        dest_dir = Path(dest_dir)
        dest_dir.mkdir(parents=True, exist_ok=True)
        warnings: builtins.list[str] = []
        skipped: builtins.list[int] = []
        for info in reversed(self.list(job_id)):
            target = dest_dir / (filename or f"epoch-{info.epoch:06d}.pt")
            problem = self._fetch_verified(info, target)
            if problem is None:
                return RestoredCheckpoint(info=info, path=target, warnings=warnings, skipped=skipped)
            skipped.append(info.epoch)
            _warn(warnings, f"checkpoint {job_id} epoch {info.epoch} ({info.key}) is unusable: "
                            f"{problem}; falling back to the previous one")
        if warnings:
            logger.warning("job %s: no checkpoint in %s verified", job_id, self.location())
        return None

    def prune(self, job_id: str, keep: int | None = None) -> int:
        """Keep the newest `keep` checkpoints (default: the block's `keep`); return how many went.

        Metadata goes before data, so readers stop choosing a checkpoint before its
        data disappears. Data without metadata (an overwritten epoch, a writer that
        died) is removed too, unless it is newer than every kept checkpoint: that may
        be a save in progress.
        """
        keep = self.keep if keep is None else keep
        if keep < 0:
            raise ValueError("keep must be >= 0")
        infos = self.list(job_id)
        doomed = infos[:max(0, len(infos) - keep)]
        for info in doomed:
            self._delete_keys([metadata_key(job_id, info.epoch)])
            self._delete_keys([info.key])
        kept = infos[len(doomed):]
        if kept:
            self._delete_orphans(job_id, {info.key for info in kept}, newest=kept[-1].epoch)
        return len(doomed)

    def delete_job(self, job_id: str) -> int:
        """Delete every object of the job; return how many checkpoints it had."""
        count = len(self.list(job_id))
        keys = self._list_keys(job_id)
        self._delete_keys([k for k in keys if _META_NAME.match(k.rpartition("/")[2])])
        self._delete_keys([k for k in keys if not _META_NAME.match(k.rpartition("/")[2])])
        return count

    # ---- helpers

    def _read_metadata(self, job_id: str, key: str, epoch: int) -> CheckpointInfo | None:
        try:
            info = CheckpointInfo.from_json(self._get_bytes(key))
        except MissingObject:
            return None  # pruned between listing and reading
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring unreadable checkpoint metadata %s: %s", key, exc)
            return None
        if info.job_id != job_id or info.epoch != epoch:
            logger.warning("ignoring checkpoint metadata %s: it describes %s epoch %d",
                           key, info.job_id, info.epoch)
            return None
        return info

    def _fetch_verified(self, info: CheckpointInfo, target: Path) -> str | None:
        """Download into a temp file beside `target`, verify, rename. Returns the problem, if any."""
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
        try:
            try:
                self._download(info.key, partial)
            except MissingObject:
                return "data object is missing"
            sha256, size = file_sha256(partial)
            if size != info.size:
                return f"size {size} bytes, expected {info.size} (truncated?)"
            if sha256 != info.sha256:
                return f"sha256 {sha256[:12]}..., expected {info.sha256[:12]}... (corrupt)"
            os.replace(partial, target)
            return None
        finally:
            partial.unlink(missing_ok=True)

    def _delete_orphans(self, job_id: str, kept_keys: set[str], newest: int) -> None:
        orphans = []
        for key in self._list_keys(job_id):
            match = _DATA_NAME.match(key.rpartition("/")[2])
            if match and key not in kept_keys and int(match.group(1)) <= newest:
                orphans.append(key)
        if orphans:
            self._delete_keys(orphans)

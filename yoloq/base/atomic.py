"""Atomic file writes: readers see the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(target: Path, write: Callable[[BinaryIO], object], prefix: str = ".tmp-",
                     mode: int | None = None) -> None:
    """Temp file in the same folder, fsync, rename over the target, fsync the folder.
    `mode` (e.g. 0o600 for a secret) is set before anything is written; default: umask's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on folders
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

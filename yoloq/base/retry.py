"""Call something again while it fails for a reason that may pass: bounded backoff, one line each.

Shared by the job's parent (`flows.recovery.patiently`) and the MLflow bookkeeping
(`yoloq.records.tracking.retrying`); each passes its own idea of a transient error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def retry_transient(fn: Callable[[], T], what: str, transient: Callable[[BaseException], bool],
                    warn: Callable[..., Any], limit_s: float, max_delay_s: float = 30.0) -> T:
    """`fn()`, retried while it raises a `transient` error, waiting 1, 2, 4 ... `max_delay_s`
    seconds and calling `warn(format, what, error, delay)` before each wait, for at most
    `limit_s`; then the last error is raised. Any other error is raised at once."""
    deadline, delay = time.monotonic() + limit_s, 1.0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or time.monotonic() + delay > deadline:
                raise
            warn("%s failed (%s); retrying in %.0f s", what, _one_line(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, max_delay_s)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text[:400]}" if text else exc.__class__.__name__

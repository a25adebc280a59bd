"""What a job does when something breaks: which errors are transient, and how long to wait.

A transient error (a store, tracking server or API that cannot be reached, a full
disk, a configured block that cannot be read) ends a segment `Crashed`, and its
parent queues it again after a backoff, a bounded number of times. Anything else
(a bad spec, a checkpoint that contradicts the plan) ends it `Failed` at once.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")

MAX_RETRIES_ENV = "YOLOQ_SEGMENT_RETRIES"
BACKOFF_ENV = "YOLOQ_RETRY_BACKOFF_S"
PATIENCE_ENV = "YOLOQ_PARENT_PATIENCE_S"


def max_retries() -> int:
    """Crashed segments in a row (no progress between them) before the job fails."""
    return int(os.environ.get(MAX_RETRIES_ENV) or 4)


def backoff_s(attempt: int) -> float:
    """Wait before re-queuing after the `attempt`-th crash in a row: 0, b, 2b, 4b ... (cap 300 s).
    The first retry is immediate: a killed segment costs only its partial epoch."""
    base = float(os.environ.get(BACKOFF_ENV) or 10.0)
    return 0.0 if attempt <= 1 else min(base * 2 ** (attempt - 2), 300.0)


def is_transient(exc: BaseException) -> bool:
    """True for failures of the surroundings, not of the job: retrying later may succeed."""
    from yoloq.engine.segment import ResumeMismatch
    from yoloq.errors import UserError
    from yoloq.settings import StoreUnavailable

    if isinstance(exc, (UserError, ResumeMismatch)):
        return False
    if isinstance(exc, (StoreUnavailable, OSError)):  # OSError: connections, timeouts, ENOSPC
        return True
    names = {cls.__module__.split(".")[0] + "." + cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"botocore.BotoCoreError", "botocore.ClientError", "httpx.TransportError",
                         "mlflow.MlflowException", "prefect.PrefectHTTPStatusError"})


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text[:400]}" if text else exc.__class__.__name__


def patiently(fn: Callable[[], T], what: str, logger: Any, limit_s: float | None = None) -> T:
    """Call `fn` until it succeeds, retrying transient errors with backoff for up to `limit_s`
    (default `YOLOQ_PARENT_PATIENCE_S`, else 600 s); then the last error is raised."""
    limit = float(os.environ.get(PATIENCE_ENV) or 600.0) if limit_s is None else limit_s
    deadline, delay = time.monotonic() + limit, 1.0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            logger.warning("%s failed (%s); retrying in %.0f s", what, one_line(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)

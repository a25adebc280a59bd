"""Call something again while it fails for a reason that may pass: bounded backoff, one line each.

`retry_transient` takes its idea of a transient error (the MLflow bookkeeping,
`yoloq.records.tracking.retrying`, passes its own); `patiently` uses `is_transient`, the job's:
a store, tracking server or API that cannot be reached, a full disk, a block that cannot be read.
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
            warn("%s failed (%s); retrying in %.0f s", what, one_line(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, max_delay_s)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text[:400]}" if text else exc.__class__.__name__


# boto3's upload and download wrap the botocore ClientError they met (e.g. a 503 SlowDown that
# outlasted botocore's own retries) in these; CI saw one end a job Failed.
_TRANSIENT_LIBRARY_ERRORS = frozenset({
    "botocore.BotoCoreError", "botocore.ClientError", "boto3.S3UploadFailedError",
    "boto3.S3TransferFailedError", "httpx.TransportError", "mlflow.MlflowException",
    "prefect.PrefectHTTPStatusError"})


def is_transient(exc: BaseException) -> bool:
    """True for failures of the surroundings, not of the job: retrying later may succeed."""
    from yoloq.base.errors import ResumeMismatch, StoreUnavailable, UserError

    if isinstance(exc, (UserError, ResumeMismatch)):
        return False
    if isinstance(exc, (StoreUnavailable, OSError)):  # OSError: connections, timeouts, ENOSPC
        return True
    names = {cls.__module__.split(".")[0] + "." + cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _TRANSIENT_LIBRARY_ERRORS)


def patiently(fn: Callable[[], T], what: str, logger: Any, limit_s: float | None = None) -> T:
    """Call `fn` until it succeeds, retrying transient errors with backoff for up to `limit_s`
    (default `YOLOQ_PARENT_PATIENCE_S`, else 600 s); then the last error is raised."""
    from yoloq.settings import settings

    limit = settings().parent_patience_s if limit_s is None else limit_s
    return retry_transient(fn, what, is_transient, logger.warning, limit)

"""One MLflow run per job, shared by every segment and process that works on it.

A job's run is found by its `yoloq.job_id` tag, so any process on any node that
reaches the same tracking store continues the same run. The run stays RUNNING
between segments; only `finish` ends it. Logging is idempotent so a retried
segment can log again: params already present are skipped (MLflow forbids
changing them) and an epoch already logged for a metric is not logged twice.

Uses `MlflowClient` explicitly: no global active run and no autolog.

A tracking server under load answers 5xx now and then (its artifact proxy passes on a
store's 500; a busy backend answers 503), and a segment asks MLflow's own client to fail
fast (`flows.segment.tracking_fails_fast`). The run's bookkeeping (open the run, tags,
artifacts, finish, registry) therefore retries transient failures itself, with bounded
backoff (1, 2, 4 ... 15 s, for at most `YOLOQ_MLFLOW_RETRY_S`, default 120 s) and one
warning line per retry; then the error is raised. Epoch metrics are not retried here:
the segment buffers them and delivers them later.
"""

from __future__ import annotations

import contextlib
from contextlib import contextmanager

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from yoloq.base import offline

offline.apply()  # MLflow reads its telemetry switch at import time

from mlflow.entities import Metric, Param, RunStatus, RunTag, ViewType  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.validation import (  # noqa: E402
    MAX_ENTITY_KEY_LENGTH,
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

from yoloq.base.paths import state_paths  # noqa: E402
from yoloq.domain.contract import (TAG_JOB_ID, TAG_PREEMPTIONS, TAG_SEGMENTS, TAG_TEAM,  # noqa: E402, F401
                                   TAG_TIER)
from yoloq.settings import settings  # noqa: E402

_COUNTER_TAGS = (TAG_SEGMENTS, TAG_PREEMPTIONS)
# MLflow's portable name rule (its Windows rule; other systems also allow ':').
_NOT_ALLOWED_IN_NAME = re.compile(r"[^/\w.\- ]")
_T = TypeVar("_T")
_LOG = logging.getLogger("yoloq.tracking")
RETRY_ENV = "YOLOQ_MLFLOW_RETRY_S"  # how long a bookkeeping call retries transient failures
DEFAULT_RETRY_S = 120.0


def mlflow_metric_name(ultralytics_name: str) -> str:
    """The name ultralytics' own MLflow callback would log, made valid for MLflow.

    ultralytics drops parentheses (`metrics/mAP50-95(B)` -> `metrics/mAP50-95B`), so
    runs compare with ones it logged itself; any other character MLflow refuses
    becomes `_`.
    """
    name = ultralytics_name.replace("(", "").replace(")", "")
    return _NOT_ALLOWED_IN_NAME.sub("_", name)[:MAX_ENTITY_KEY_LENGTH]


def flatten_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings -> `a.b.c` keys with string values cut to MLflow's length limit."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, name))
        else:
            key_name = _NOT_ALLOWED_IN_NAME.sub("_", name)[:MAX_ENTITY_KEY_LENGTH]
            flat[key_name] = str(value)[:MAX_PARAM_VAL_LENGTH]
    return flat


def default_tracking_uri() -> str:
    """The project's own store: `sqlite:///<state>/mlflow.db`, no server needed."""
    paths = state_paths().ensure()
    return paths.mlflow_uri


def artifact_location_for(tracking_uri: str) -> str | None:
    """Artifacts beside a SQLite store (`<folder of the db>/mlartifacts`).

    MLflow's own default for a SQLite store is `./mlruns` in the current folder,
    which would scatter artifacts wherever a process happens to start. For a
    tracking server, None lets the server decide (`--artifacts-destination`).
    """
    parsed = urlparse(tracking_uri)
    if parsed.scheme != "sqlite":
        return None
    db_file = Path(unquote(tracking_uri[len("sqlite:///"):]))
    return (db_file.parent / "mlartifacts").resolve().as_uri()


class JobTracker:
    """MLflow bookkeeping for yoloq jobs: one run per job id."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = "yoloq", *,
                 registry_uri: str | None = None, artifact_location: str | None = None) -> None:
        self.tracking_uri = tracking_uri or default_tracking_uri()
        self.experiment = experiment
        with _first_use_lock(self.tracking_uri):  # the store is created (migrated) here
            self.client = MlflowClient(tracking_uri=self.tracking_uri,
                                       registry_uri=registry_uri or self.tracking_uri)
            self.client.search_experiments(max_results=1)
        self._artifact_location = artifact_location or artifact_location_for(self.tracking_uri)
        self._experiment_id: str | None = None

    # -- the run -------------------------------------------------------------

    def run_for_job(self, job_id: str, *, params: Mapping[str, Any] | None = None,
                    tags: Mapping[str, str] | None = None) -> str:
        """The job's run id: found by its tag, or created. Reopens a terminated run.

        Params are flattened and logged once; keys already on the run keep their
        first value. Tags are set every time (they may change).
        """
        return retrying(f"opening the MLflow run of {job_id}",
                        lambda: self._run_for_job(job_id, params, tags))

    def _run_for_job(self, job_id: str, params: Mapping[str, Any] | None,
                     tags: Mapping[str, str] | None) -> str:
        with _run_creation_lock(self.tracking_uri, job_id):
            run_id = self.find_run(job_id) or self._create_run(job_id)
        run = self.client.get_run(run_id)
        if run.info.status != "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        new_params = {k: v for k, v in flatten_params(params or {}).items()
                      if k not in run.data.params}
        self._log_batch(run_id, params=[Param(k, v) for k, v in new_params.items()])
        if tags:
            self._set_tags(run_id, dict(tags))
        return run_id

    def is_finished(self, job_id: str) -> bool:
        """True when the job's run exists and was ended with FINISHED."""
        def finished() -> bool:
            run_id = self.find_run(job_id)
            return run_id is not None and self.client.get_run(run_id).info.status == "FINISHED"

        return retrying(f"reading the MLflow run of {job_id}", finished)

    def find_run(self, job_id: str) -> str | None:
        """The oldest live run tagged with this job id (the one every process agrees on)."""
        runs = self.client.search_runs(
            [self._experiment()], filter_string=f"tags.`{TAG_JOB_ID}` = '{_quote(job_id)}'",
            run_view_type=ViewType.ACTIVE_ONLY, max_results=50)
        if not runs:
            return None
        oldest = min(runs, key=lambda run: (run.info.start_time, run.info.run_id))
        return oldest.info.run_id

    def _create_run(self, job_id: str) -> str:
        """Create the run; if another process created one at the same time, keep the oldest.

        "Oldest" alone can disagree: a process that stamped its run first but committed it
        second sees only its own run, while the other sees both and keeps the older. On a
        SQLite store `_run_creation_lock` makes find-or-create one step; on a tracking
        server one job's segments start one at a time (the scheduler's rule), so the
        rule below is the fallback."""
        tags = {TAG_JOB_ID: job_id, **{key: "0" for key in _COUNTER_TAGS}}
        created = self.client.create_run(self._experiment(), tags=tags, run_name=job_id)
        winner = self.find_run(job_id) or created.info.run_id
        if winner != created.info.run_id:
            self.client.delete_run(created.info.run_id)
        return winner

    def _experiment(self) -> str:
        if self._experiment_id is None:
            with _first_use_lock(self.tracking_uri):
                self._experiment_id = self._get_or_create_experiment()
        return self._experiment_id

    def _get_or_create_experiment(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment,
                                                 artifact_location=self._artifact_location)
        except MlflowException as error:  # created by another process meanwhile
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise error
            return found.experiment_id

    # -- logging -------------------------------------------------------------

    def log_epoch(self, run_id: str, epoch: int, metrics: Mapping[str, float]) -> None:
        """Log one epoch's metrics at step=epoch (see `log_metrics`)."""
        self.log_metrics(run_id, metrics, step=epoch)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log metrics at `step`, skipping any (metric, step) already logged.

        Names are sanitised with `mlflow_metric_name`. A retried segment that
        logs the same epoch again adds no point; the first value stays.
        """
        timestamp = int(time.time() * 1000)
        fresh = []
        for raw_name, value in metrics.items():
            name = mlflow_metric_name(raw_name)
            if not self._has_step(run_id, name, step):
                fresh.append(Metric(name, float(value), timestamp, int(step)))
        self._log_batch(run_id, metrics=fresh)

    def _has_step(self, run_id: str, name: str, step: int) -> bool:
        return any(point.step == step for point in self.client.get_metric_history(run_id, name))

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        retrying(f"setting tags on MLflow run {run_id}", lambda: self._set_tags(run_id, tags))

    def _set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        self._log_batch(run_id, tags=[RunTag(k, str(v)[:MAX_TAG_VAL_LENGTH]) for k, v in tags.items()])

    def increment_tag(self, run_id: str, key: str) -> int:
        """Add one to a counter tag (e.g. `yoloq.segments`) and return the new value.

        Read-modify-write: only the process that owns the job's current segment
        should call it.
        """
        def increment() -> int:
            current = self.client.get_run(run_id).data.tags.get(key, "0")
            value = (int(current) if current.strip().isdigit() else 0) + 1
            self.client.set_tag(run_id, key, str(value))
            return value

        return retrying(f"counting {key} on MLflow run {run_id}", increment)

    def log_artifacts(self, run_id: str, paths: Iterable[Path],
                      artifact_path: str | None = None) -> None:
        """Files go under `artifact_path`; a folder goes under `artifact_path/<folder name>`."""
        for path in map(Path, paths):
            if path.is_dir():
                inside = f"{artifact_path}/{path.name}" if artifact_path else path.name
                retrying(f"uploading {path.name}/ to MLflow run {run_id}",
                         lambda: self.client.log_artifacts(run_id, str(path), inside))
            elif path.is_file():
                retrying(f"uploading {path.name} to MLflow run {run_id}",
                         lambda: self.client.log_artifact(run_id, str(path), artifact_path))
            else:
                raise FileNotFoundError(f"artifact to log does not exist: {path}")

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """End the job's run: FINISHED, FAILED or KILLED."""
        if not RunStatus.is_terminated(RunStatus.from_string(status)):
            raise ValueError(f"finish needs a terminal status, not {status!r}")
        retrying(f"ending MLflow run {run_id}", lambda: self.client.set_terminated(run_id, status))

    # -- registry ------------------------------------------------------------

    def register_model(self, run_id: str, path: Path, name: str) -> str:
        """Log `path` under the run's `model/` artifacts and register it as a version of `name`.

        Idempotent: registering the same file from the same run again returns the
        existing version.
        """
        path = Path(path)
        return retrying(f"registering {path.name} from MLflow run {run_id}",
                        lambda: self._register_model(run_id, path, name))

    def _register_model(self, run_id: str, path: Path, name: str) -> str:
        self.client.log_artifact(run_id, str(path), "model")
        run = self.client.get_run(run_id)
        source = f"{run.info.artifact_uri}/model/{path.name}"
        self._ensure_registered_model(name)
        existing = self.client.search_model_versions(
            f"name = '{_quote(name)}' and run_id = '{run_id}'")
        for version in existing:
            if version.source == source:
                return str(version.version)
        job_tag = {TAG_JOB_ID: run.data.tags[TAG_JOB_ID]} if TAG_JOB_ID in run.data.tags else {}
        version = self.client.create_model_version(name, source, run_id=run_id, tags=job_tag)
        return str(version.version)

    def _ensure_registered_model(self, name: str) -> None:
        try:
            self.client.get_registered_model(name)
        except MlflowException:
            try:
                self.client.create_registered_model(name)
            except MlflowException:  # created by another process meanwhile
                self.client.get_registered_model(name)

    # -- helpers -------------------------------------------------------------

    def _log_batch(self, run_id: str, *, metrics: list[Metric] = (), params: list[Param] = (),
                   tags: list[RunTag] = ()) -> None:
        for chunk in _chunks(list(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=chunk)
        for chunk in _chunks(list(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(list(tags), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, tags=chunk)


@contextmanager
def _first_use_lock(tracking_uri: str) -> Iterator[None]:
    """Serialise first access to a SQLite store: MLflow migrates a new database on first
    use, and two segments starting at once would race on that migration. Once a first use
    has succeeded (`<db>.ready`), nobody locks: a hung process holding the lock (a frozen
    data loader) must not stall every other job's MLflow access."""
    if not tracking_uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db_path = tracking_uri.removeprefix("sqlite:///")
    ready = Path(db_path + ".ready")
    if ready.exists():
        yield
        return
    lock_path = Path(db_path + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
            use_wal(db_path)
            ready.touch()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def use_wal(db_path: str) -> None:
    """Put the SQLite store in write-ahead-log mode (kept in the file): readers (the job page,
    `yoloq status`) then never wait for a writer. In the default rollback journal a segment
    stopped mid-transaction (frozen, or hung on a disk) locked every reader out: the job page
    said "database is locked" after SQLite's 20 s wait (a CI run)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db_path, timeout=30)) as db:
        db.execute("PRAGMA journal_mode=WAL")


@contextmanager
def _run_creation_lock(tracking_uri: str, job_id: str) -> Iterator[None]:
    """Serialise find-or-create of one job's run on a SQLite store (a lock file per job,
    so a process stopped inside this step can stall only its own job)."""
    if not tracking_uri.startswith("sqlite:///"):
        yield
        return
    import fcntl
    import hashlib

    locks = Path(tracking_uri.removeprefix("sqlite:///") + ".locks")
    locks.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(job_id.encode()).hexdigest()[:24]
    with open(locks / f"run-{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def retrying(what: str, fn: Any, limit_s: float | None = None) -> Any:
    """`fn()`, retrying transient MLflow failures (5xx, 429, timeouts, refused or reset
    connections) with backoff 1, 2, 4 ... 15 s for at most `limit_s` (default
    `YOLOQ_MLFLOW_RETRY_S`, 120 s), one warning line per retry; then the last error is
    raised. Anything else (a bad request, a missing run) is raised at once."""
    from yoloq.base.retry import retry_transient

    limit = settings().mlflow_retry_s if limit_s is None else limit_s
    return retry_transient(fn, f"MLflow: {what}", is_transient, _LOG.warning, limit, max_delay_s=15.0)


_TRANSIENT_CODES = frozenset({"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED",
                              "DEADLINE_EXCEEDED", "ABORTED", "SERVICE_UNDER_MAINTENANCE"})


def is_transient(exc: BaseException) -> bool:
    """A failure of the tracking server or the way to it that asking again may cure."""
    import requests

    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code in (408, 429)
    if isinstance(exc, (requests.RequestException, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, MlflowException):
        status = exc.get_http_status_code()
        return exc.error_code in _TRANSIENT_CODES or status >= 500 or status == 429
    return False


def _chunks(items: list[_T], size: int) -> Iterator[list[_T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _quote(value: str) -> str:
    """Escape a value for an MLflow search filter string."""
    return value.replace("\\", "\\\\").replace("'", "\\'")

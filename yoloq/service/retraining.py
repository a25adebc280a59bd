"""`retrain`: resubmit the latest job of each spec that trains on a dataset.

Started by the `retrain-on-dataset-update` deployment's event trigger (a
`dataset.updated` event whose resource is `yoloq.dataset.<name>` and carries
`yoloq.dataset.path`), or on a cron schedule by `retrain-nightly` for every
dataset used in the last week. `yoloq dataset updated DATA_YAML` emits the event.

A retrained job is admitted as `yoloq submit` admits it (quota, tier cap, fit on the
pool): a spec refused today is logged with its one-line reason and the others go ahead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from yoloq.base import offline

offline.apply()

from prefect import flow, get_run_logger  # noqa: E402


@flow(name="retrain", log_prints=True)
def retrain(dataset: str | None = None, max_jobs: int = 10) -> list[str]:
    """Resubmit, as new jobs, the latest job per spec name using `dataset` (all datasets if None)."""
    from yoloq.domain.spec import parse_spec
    from yoloq.service.submission import Job, analyse_job, submit_batch

    logger = get_run_logger()
    wanted = str(Path(dataset).resolve()) if dataset else None
    jobs = [Job(f"retrain of {name}", spec=parse_spec(spec))
            for name, spec in list(latest_specs(wanted).items())[:max_jobs]]
    for job in jobs:
        analyse_job(job, None)
    if jobs and any(job.error is None for job in jobs):
        submit_batch(jobs, None, keep_going=True,
                     reason=f"retrain ({'dataset updated' if wanted else 'schedule'})")
    for job in jobs:
        if job.error is not None:
            logger.warning("%s refused: %s", job.source, job.error)
        elif job.result is not None:
            logger.info("%s submitted as %s", job.source, job.result["job_id"])
    if not jobs:
        logger.info("no job uses %s; nothing to retrain", dataset or "any dataset")
    return [job.result["job_id"] for job in jobs if job.result is not None]


def latest_specs(dataset: str | None) -> dict[str, dict[str, Any]]:
    """The newest job's spec for each spec name (those training on `dataset` when given)."""
    from yoloq.records.jobs import list_jobs
    from yoloq.service.connection import stack_client

    latest: dict[str, dict[str, Any]] = {}
    with stack_client() as client:
        for job in list_jobs(client, limit=200):  # newest first
            spec = (job.flow_run.parameters or {}).get("spec") or {}
            if dataset and str(Path(spec.get("data", "")).resolve()) != dataset:
                continue
            latest.setdefault(spec.get("name", job.job_id), spec)
    return latest

"""`retrain`: resubmit the latest job of each spec that trains on a dataset.

Started by the `retrain-on-dataset-update` deployment's event trigger (a
`dataset.updated` event whose resource is `yoloq.dataset.<name>` and carries
`yoloq.dataset.path`), or on a cron schedule by `retrain-nightly` for every
dataset used in the last week. `yoloq dataset updated DATA_YAML` emits the event.
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
    from prefect.client.orchestration import get_client

    from yoloq.service.submission import create_job_run
    from yoloq.records.jobs import list_jobs
    from yoloq.domain.spec import parse_spec

    logger = get_run_logger()
    wanted = str(Path(dataset).resolve()) if dataset else None
    with get_client(sync_client=True) as client:
        latest: dict[str, dict[str, Any]] = {}
        for job in list_jobs(client, limit=200):  # newest first
            spec = (job.flow_run.parameters or {}).get("spec") or {}
            if wanted and str(Path(spec.get("data", "")).resolve()) != wanted:
                continue
            latest.setdefault(spec.get("name", job.job_id), spec)
    submitted = []
    for name, spec in list(latest.items())[:max_jobs]:
        job_id = create_job_run(parse_spec(spec), reason=f"retrain ({'dataset updated' if wanted else 'schedule'})")
        logger.info("retraining %s as %s", name, job_id)
        submitted.append(job_id)
    if not submitted:
        logger.info("no job uses %s; nothing to retrain", dataset or "any dataset")
    return submitted

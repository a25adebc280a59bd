"""Bulk submit: many specs in one call, admitted all or nothing (`POST /v1/jobs/bulk`).

Each spec gets the very verdict a single submit gives (`yoloq.service.admission.admit`:
analysis, the team's tier cap, the fit on the pool). The first refused spec refuses the whole
batch, naming its index, before any run exists. What a single submit pays per job is paid
once per batch here:

- a dataset that many specs share is validated once per request (its folders listed and its
  labels read once), not once per spec: the analysis of each spec still runs, on that result;
- the pool (policy in force, live nodes' GPUs) and the `yolo-job` deployment are read once;
- the runs are created through the server's Scheduled-runs route
  (`yoloq.ops.scheduled_runs`: one transaction and batched writes per call, up to
  `PREFECT_BULK` runs), not one request, nor one orchestrated state, per run.

A creation that fails part way (the server refused a run, or went away) deletes the runs of
the batch it had created, so a refused batch leaves nothing behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from yoloq.base.errors import UserError
from yoloq.service.admission import TIER_CAP, Verdict, admit, pool_context
from yoloq.service.connection import stack_client

BULK_LIMIT = 1000  # specs per request; a larger batch is split by the client
PREFECT_BULK = 500  # runs per call of the server's Scheduled-runs route
_LOG = logging.getLogger("yoloq.service.bulk")


class BulkRefused(UserError):
    """One spec of a batch was refused: nothing was created. `index` is its place (from 0);
    `refused_by` says what refused it (`admission.TIER_CAP` makes the API answer 403)."""

    def __init__(self, index: int, cause: UserError, refused_by: str) -> None:
        self.index, self.cause, self.refused_by = index, cause, refused_by
        fix = f"{cause.fix}; " if cause.fix else ""
        super().__init__(f"jobs[{index}].{cause.field}", cause.problem,
                         f"{fix}nothing was created; fix that spec and send the batch again")


@dataclass(frozen=True)
class BulkResult:
    job_ids: tuple[str, ...]
    notes: tuple[str, ...]  # each once, from every verdict of the batch

    def to_dict(self) -> dict[str, Any]:
        return {"created": len(self.job_ids), "job_ids": list(self.job_ids), "notes": list(self.notes)}


def once_per_request(validate: Callable[..., Any]) -> Callable[..., Any]:
    """`validate` with its answer (or its refusal) kept per (dataset, task, options): the
    batch's specs read each dataset once. Kept for one request only, so a dataset changed
    between requests is read again."""
    seen: dict[tuple[Any, ...], Any] = {}

    def check(data: Any, *args: Any, **kwargs: Any) -> Any:
        key = (str(data), args, tuple(sorted(kwargs.items())))
        if key not in seen:
            try:
                seen[key] = validate(data, *args, **kwargs)
            except UserError as exc:
                seen[key] = exc
        answer = seen[key]
        if isinstance(answer, UserError):
            raise answer
        return answer

    return check


def check_size(count: int) -> None:
    if count < 1:
        raise UserError("jobs", "the batch is empty", "send a JSON list of one or more job specs")
    if count > BULK_LIMIT:
        raise UserError("jobs", f"{count} specs in one batch, more than {BULK_LIMIT}",
                        f"split it into batches of at most {BULK_LIMIT}")


def admit_all(specs: Sequence[Any], pool: Any) -> list[Verdict]:
    """Every spec's verdict (the single submit's `admit`), the analysis first for all, then
    the pool; raise `BulkRefused` for the first refused spec."""
    from yoloq.datasets.validate import validate_dataset

    validate = once_per_request(validate_dataset)
    analysed = [admit(spec, None, None, validate=validate) for spec in specs]
    _refuse_first(analysed)
    verdicts = [admit(spec, None, pool, analysis=v.analysis) for spec, v in zip(specs, analysed)]
    _refuse_first(verdicts)
    return verdicts


def _refuse_first(verdicts: Sequence[Verdict]) -> None:
    for index, verdict in enumerate(verdicts):
        if verdict.refusal is not None:
            raise BulkRefused(index, verdict.refusal, verdict.refused_by)


def submit_bulk(specs: Sequence[Any], reason: str, tags: tuple[str, ...] = ()) -> BulkResult:
    """Admit every spec (all or nothing), then create their `yolo-job` runs in bulk and record
    each job's `submitted` event. Returns the job ids in the specs' order."""
    from yoloq.records.events import emit_job_event
    from yoloq.service.submission import job_deployment_id, new_job_id

    check_size(len(specs))
    with stack_client() as client:
        verdicts = admit_all(specs, pool_context(client, None))
        deployment_id = job_deployment_id(client)
        job_ids = [new_job_id(spec) for spec in specs]
        create_runs(client, deployment_id, run_requests(specs, verdicts, job_ids, tags))
    for spec, job_id in zip(specs, job_ids):
        emit_job_event("submitted", job_id, spec.team, tier=spec.priority, reason=reason)
    notes = tuple(dict.fromkeys(n for v in verdicts for n in v.notes))
    return BulkResult(tuple(job_ids), notes)


def run_requests(specs: Sequence[Any], verdicts: Sequence[Verdict], job_ids: Sequence[str],
                 tags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The admitted jobs' `yolo-job` run requests, an urgent job's announcement in its labels."""
    from work_pools.announce import announce_labels
    from yoloq.service.submission import Job, first_plan, job_run_request

    return [job_run_request(spec, job_id, tags, announce_labels(
        first_plan(Job("bulk", spec=spec, analysis=verdict.analysis))))
        for spec, job_id, verdict in zip(specs, job_ids, verdicts)]


def create_runs(client: Any, deployment_id: Any, requests: list[dict[str, Any]]) -> list[str]:
    """Create the runs through the server's Scheduled-runs route, `PREFECT_BULK` at a time; on
    any failure delete the runs created so far and raise. Returns the flow run ids."""
    from yoloq.base.names import SCHEDULED_RUNS_ROUTE

    created: list[str] = []
    try:
        for start in range(0, len(requests), PREFECT_BULK):
            chunk = requests[start:start + PREFECT_BULK]
            response = client.request("POST", SCHEDULED_RUNS_ROUTE, path_params={"id": deployment_id}, json=chunk)
            results = response.json().get("results", [])
            created += [r["flow_run_id"] for r in results if r.get("status") == "CREATED"]
            failed = [(start + i, r.get("error")) for i, r in enumerate(results) if r.get("status") != "CREATED"]
            if failed or len(results) != len(chunk):
                index, error = failed[0] if failed else (start + len(results), "no answer for it")
                raise UserError(f"jobs[{index}]", f"Prefect did not create the run: {error}",
                                "nothing was created; send the batch again")
    except BaseException:
        _delete(client, created)
        raise
    return created


def _delete(client: Any, flow_run_ids: list[str]) -> None:
    """Undo a partly created batch (a run not deleted is logged: the parent would run it)."""
    for run_id in flow_run_ids:
        try:
            client.delete_flow_run(run_id)
        except Exception as exc:  # noqa: BLE001 -- keep deleting the others
            _LOG.error("bulk submit: could not delete run %s of a refused batch: %s", run_id, exc)


def refusal_status(exc: BulkRefused) -> int:
    """What the API answers for a refused batch: 403 for a tier above the team's cap, else 422."""
    return 403 if exc.refused_by == TIER_CAP else 422

"""Shared by the fault tests: submit a job, find its segments, and the one check every fault
ends with: the job completed with its full epoch count, one MLflow run (FINISHED), and
every epoch trained exactly once according to the epoch ledger (or within a stated bound)."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from stack_helpers import segment_pid, wait_final, wait_for, yoloq  # noqa: F401 (wait_for: re-exported)


def submit(spec: Path, cli=yoloq) -> str:
    out = cli("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def segments(job_id: str) -> list[Any]:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def running_segment(job_id: str) -> Any | None:
    return next((s for s in segments(job_id) if s.state and s.state.is_running()), None)


def running_epoch(job_id: str) -> int | None:
    seg = running_segment(job_id)
    return int((seg.labels or {}).get("yoloq.epoch", 0)) if seg else None


def epoch_reached(job_id: str, epoch: int) -> bool:
    """True once a running segment of the job is at `epoch` or later; fails at once if the
    job has ended first (a failed job would otherwise cost the whole wait)."""
    if (running_epoch(job_id) or 0) >= epoch:
        return True
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import parent_run

    with get_client(sync_client=True) as client:
        state = parent_run(client, job_id).state
    assert not (state and state.is_final()), f"job {job_id} ended {state.name} before epoch {epoch}"
    return False


def kill_segment(flow_run_id: Any) -> float:
    """SIGKILL the segment's whole process group; returns when it was killed (monotonic)."""
    pid = segment_pid(flow_run_id)
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    return time.monotonic()


def mlflow_runs(job_id: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    from blocks import stores

    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=f"tags.`yoloq.job_id` = '{job_id}'")


def trainings(job_id: str) -> dict[int, int]:
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    return trainings_per_epoch(epoch_trainings(job_id))


def assert_job_recovered(job_id: str, epochs: int, *, repeats_allowed: int = 0,
                         timeout_s: float = 900, cli=yoloq) -> dict[str, Any]:
    """Completed, full epoch count, one FINISHED MLflow run, each epoch trained once (at most
    `repeats_allowed` extra trainings in all). Returns the final status and the counts."""
    status = wait_final(job_id, timeout_s, cli=cli)
    assert status["state"] == "Completed", status
    assert status["epochs_done"] == epochs, status
    runs = mlflow_runs(job_id)
    assert len(runs) == 1, [r.info.run_id for r in runs]
    assert runs[0].info.status == "FINISHED", runs[0].info.status
    counts = trainings(job_id)
    assert sorted(counts) == list(range(1, epochs + 1)), counts
    assert sum(counts.values()) - epochs <= repeats_allowed, counts
    return {"status": status, "trainings": counts, "run": runs[0]}


def report(fault: str, **figures: Any) -> None:
    """One line per fault for the README's matrix (shown with `pytest -s`)."""
    print(f"\nFAULT-MATRIX {fault}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


class FaultAfterEpoch(logging.LoggerAdapter):
    """A segment logger that runs `fault` once, right after epoch `epoch` is logged done."""

    def __init__(self, epoch: int, fault) -> None:
        super().__init__(logging.getLogger("yoloq.faults"), {})
        self.epoch, self.fault, self.fired = epoch, fault, False

    def info(self, msg, *args, **kwargs) -> None:
        super().info(msg, *args, **kwargs)
        if not self.fired and msg.startswith("epoch %d done") and args[0] == self.epoch:
            self.fired = True
            self.fault()

"""Run by tests/test_job_runner.py through the job runner's `execute`: a flow whose run is
set Cancelling just before it returns, as `yoloq cancel` landed in CI while a job's last
segment completed."""

from __future__ import annotations

from prefect import flow


@flow(name="yoloq-cancel-probe")
def cancelled_at_the_end() -> str:
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, Cancelling(message="probe cancelled"), force=True)
    return "done"

"""The guards that make a duplicate impossible rather than unlikely, each tested directly:
the segment's idempotency key (two parents of one job create one segment run), the parent
token (a parent whose token was replaced leaves without touching the job), the segment's
check for an older live segment of its job, and the recovery rule that only a process
that is really gone counts as gone. No training: runs of a no-op flow on the session's
server stand in for a job's parent and segments (the guards read only their labels,
tags, parameters and states)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from prefect import flow

from flows.job import ParentGuard, segment_identity

LOG = logging.getLogger("yoloq.test")


@flow(name="guard-stand-in")
def stand_in(job_id: str = "", stop_after_epoch: int = 0) -> None:
    """Never run: its runs carry what a segment's or a parent's run carries."""


def _ended(epochs_done: int) -> SimpleNamespace:
    return SimpleNamespace(parameters={"plan": {"epochs_done": epochs_done}})


@pytest.mark.parametrize("done, target, earlier, expected", [
    pytest.param(0, 2, [], ("j.s1.e0-2", "j:from-e0:try-0"), id="first"),
    pytest.param(0, 2, [_ended(0)], ("j.s2.e0-2", "j:from-e0:try-1"), id="retry-after-crash"),
    pytest.param(2, 3, [_ended(0)], ("j.s2.e2-3", "j:from-e2:try-0"), id="after-progress"),
    pytest.param(3, 3, [_ended(0), _ended(2)], ("j.s3.finalise-e3", "j:from-e3:try-0"),
                 id="finalise"),
])
def test_segment_identity(done, target, earlier, expected):
    """Two parents reading the same segments derive the same key; every ended try makes a
    new one (so a crashed segment can be queued again)."""
    assert segment_identity("j", done, target, earlier) == expected
    assert segment_identity("j", done, target, list(earlier)) == expected


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


@pytest.mark.service
def test_two_creations_with_one_segment_key_make_one_run(yoloq_stack):
    """What two parents (or a retried request) of one job do at the same moment: Prefect
    returns the first run for the second creation. Scheduled a day ahead, so no node runs it."""
    from prefect.deployments import run_deployment
    from prefect.states import Cancelled

    from yoloq.base.names import SEGMENT_DEPLOYMENT

    job = f"guard-{uuid.uuid4().hex[:6]}"
    name, key = segment_identity(job, 0, 1, [])
    later = datetime.now(timezone.utc) + timedelta(days=1)
    runs = [run_deployment(SEGMENT_DEPLOYMENT, parameters={"job_id": job, "spec": {}, "stop_after_epoch": 1},
                           flow_run_name=name, idempotency_key=key, scheduled_time=later,
                           tags=[f"job:{job}"], timeout=0) for _ in range(2)]
    with _client() as client:
        client.set_flow_run_state(runs[0].id, Cancelled(), force=True)
    assert runs[0].id == runs[1].id


@pytest.mark.service
def test_a_retried_job_creation_makes_one_job(yoloq_stack, tiny_dataset, tmp_path):
    """The job id is the parent run's idempotency key: creating the same job twice (a client
    retrying after a lost response) gives one run. The job pool is paused meanwhile, so no
    runner starts it."""
    from prefect.client.schemas.actions import WorkPoolUpdate
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from stack_helpers import write_spec

    from yoloq.commands.submit import create_job_run, job_deployment_id
    from yoloq.base.names import JOBS_POOL
    from yoloq.domain.spec import load_spec

    spec = load_spec(write_spec(tmp_path / "job.yaml", tiny_dataset, name="retried"))
    job = f"retried-{uuid.uuid4().hex[:6]}"
    with _client() as client:
        client.update_work_pool(JOBS_POOL, WorkPoolUpdate(is_paused=True))
        try:
            deployment = job_deployment_id(client)
            made = [create_job_run(spec, "test", client=client, deployment_id=deployment, job_id=job),
                    create_job_run(spec, "test", job_id=job)]  # the run_deployment path too
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[job])))
            for run in runs:
                client.delete_flow_run(run.id)
        finally:
            client.update_work_pool(JOBS_POOL, WorkPoolUpdate(is_paused=False))
    assert made == [job, job]
    assert len(runs) == 1


@pytest.mark.service
def test_a_parent_whose_token_was_replaced_leaves_without_touching_the_job(yoloq_stack, monkeypatch):
    from prefect.exceptions import Abort
    from prefect.states import Cancelled, Cancelling

    with _client() as client:
        run = client.create_flow_run(stand_in, name=f"guard-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(run.id))
    first = ParentGuard("job", LOG)
    assert first.check() is False
    second = ParentGuard("job", LOG)  # a second parent process of the same job
    assert second.token != first.token
    with pytest.raises(Abort, match="another parent took over"):
        first.check()
    assert second.check() is False
    with _client() as client:
        client.set_flow_run_state(run.id, Cancelling(), force=True)
        assert second.check() is True  # the survivor sees the user's cancel
        assert client.read_flow_run(run.id).labels[ParentGuard.LABEL] == second.token
        client.set_flow_run_state(run.id, Cancelled(), force=True)


@pytest.mark.service
def test_a_segment_with_an_older_live_segment_of_its_job_trains_nothing(yoloq_stack, monkeypatch):
    from prefect.states import Cancelled, Running

    from flows.segment import _other_live_segment, _segment
    from yoloq.domain.spec import JobSpec

    job = f"guard-{uuid.uuid4().hex[:6]}"
    with _client() as client:
        older, newer = (client.create_flow_run(stand_in, name=f"{job}.s{i}", tags=[f"job:{job}"],
                                               parameters={"job_id": job, "stop_after_epoch": 1})
                        for i in (1, 2))
        for run in (older, newer):  # older enters Running first: it keeps the job
            client.set_flow_run_state(run.id, Running(), force=True)
    try:
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(older.id))
        assert _other_live_segment(job) is None
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(newer.id))
        assert _other_live_segment(job) == older.name
        spec = JobSpec.model_validate({"name": "g", "team": "vision", "data": "none.yaml",
                                    "model": "yolov8n.yaml"})
        state = _segment(spec, job, 1, {}, LOG)  # before any store, MLflow or GPU is touched
        assert state.is_crashed() and older.name in state.message, state
    finally:
        with _client() as client:
            for run in (older, newer):
                client.set_flow_run_state(run.id, Cancelled(), force=True)


def test_only_a_process_that_is_really_gone_counts_as_gone(tmp_path):
    """`yoloq up` resets a run only when its recorded process is gone: a live process of this
    state folder is alive, a PID now used by another program or an ended one is gone; with
    no PID recorded, the run is gone only when the service that starts it is down; a parent
    recorded by a runner on another host cannot be judged here and is left to that host."""
    import socket

    from flows.recovery import other_host, process_gone

    root, here = str(tmp_path / "home"), socket.gethostname()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleep, env={**os.environ, "YOLOQ_HOME": root})
    other = subprocess.Popen(sleep, env={**os.environ, "YOLOQ_HOME": str(tmp_path / "other")})
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        assert not process_gone(f"{here}:{ours.pid}", root, starter_alive=False)
        assert process_gone(f"{here}:{other.pid}", root, starter_alive=True)
        assert process_gone(str(ended.pid), root, starter_alive=True)
        assert not process_gone(None, root, starter_alive=True)
        assert process_gone(None, root, starter_alive=False)
        assert other_host(f"gpu-host-7:{ended.pid}") == "gpu-host-7"
        assert other_host(f"{here}:{ended.pid}") is None and other_host(str(ended.pid)) is None
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()


@pytest.mark.service
def test_up_leaves_a_parent_of_another_hosts_runner_alone(yoloq_stack):
    """On a cluster a job's parent may run in the job runner of another host: `yoloq up`
    here cannot see that process, so it names the host and resets nothing (its PID, which
    is dead on this host, would otherwise start a second parent)."""
    from prefect.states import Cancelled, Running

    from flows.recovery import recover_interrupted
    from yoloq.base.names import JOB_DEPLOYMENT

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with _client() as client:
        deployment = client.read_deployment_by_name(JOB_DEPLOYMENT)
        run = client.create_flow_run_from_deployment(
            deployment.id, parameters={"spec": {}, "job_id": "elsewhere"}, state=Running(),
            name=f"guard-{uuid.uuid4().hex[:6]}")
        client.update_flow_run(run.id, infrastructure_pid=f"gpu-host-7:{dead.pid}")
        try:
            said: list[str] = []
            recover_interrupted(said.append, runner_alive=True, worker_alive=True)
            assert client.read_flow_run(run.id).state.is_running()
            assert any("gpu-host-7" in line for line in said), said
        finally:
            client.set_flow_run_state(run.id, Cancelled(), force=True)

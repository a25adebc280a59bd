"""The Prefect server yoloq runs checks a deployment run's job variables once per distinct
input (`yoloq.ops.server.job_variable_checks_remembered`): the check Prefect runs is called with
the real process-pool template, and what it refuses stays refused."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi import HTTPException
from prefect.server.api import deployments, validation
from prefect.workers.process import ProcessWorker

from yoloq.ops import server


@pytest.fixture
def checks(monkeypatch):
    """Install the remembering check over Prefect's own, counting the real checks run."""
    calls = []
    real = validation._validate_work_pool_job_variables

    async def counted(*args, **kwargs):
        calls.append(args[3:])
        return await real(*args, **kwargs)

    monkeypatch.setattr(validation, "_validate_work_pool_job_variables", counted)
    monkeypatch.setattr(deployments, "validate_job_variables_for_deployment_flow_run",
                        validation.validate_job_variables_for_deployment_flow_run)
    server.job_variable_checks_remembered()
    return calls


def check(template, deployment_vars=None, run_vars=None):
    pool = SimpleNamespace(name="yolo-jobs", base_job_template=template)
    deployment = SimpleNamespace(id="d", work_queue=SimpleNamespace(work_pool=pool),
                                 job_variables=deployment_vars or {})
    run = SimpleNamespace(job_variables=run_vars or {})
    return asyncio.run(deployments.validate_job_variables_for_deployment_flow_run(None, deployment, run))


def test_the_same_job_variables_are_checked_once(checks):
    template = ProcessWorker.get_default_base_job_template()
    for _ in range(5):
        check(template, {"env": {"A": "1"}})
    assert len(checks) == 1
    check(template, {"env": {"A": "2"}})  # another combination: checked
    assert len(checks) == 2


def test_a_refused_combination_is_refused_every_time(checks):
    template = ProcessWorker.get_default_base_job_template()
    for _ in range(2):
        with pytest.raises(HTTPException) as refused:
            check(template, run_vars={"stream_output": {"not": "a boolean"}})
        assert refused.value.status_code == 422
    assert len(checks) == 2


def test_a_template_naming_a_block_is_checked_every_time(checks, monkeypatch):
    template = ProcessWorker.get_default_base_job_template()
    template["variables"]["properties"]["env"]["default"] = {"$ref": {"block_document_id": "b"}}

    async def no_block_lookup(variable, session):  # the block's data, as the database would give it
        return {"A": "1"}

    monkeypatch.setattr(validation, "_resolve_default_reference", no_block_lookup)
    check(template)
    check(template)
    assert len(checks) == 2


def test_the_remembered_combinations_are_bounded(checks, monkeypatch):
    monkeypatch.setattr(server, "REMEMBERED_CHECKS", 3)
    template = ProcessWorker.get_default_base_job_template()
    for value in ("1", "2", "3", "4"):
        check(template, {"env": {"A": value}})
    before = len(checks)
    check(template, {"env": {"A": "1"}})  # the oldest was dropped: checked again
    check(template, {"env": {"A": "4"}})  # the newest is still remembered
    assert len(checks) == before + 1

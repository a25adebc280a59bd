"""Soft preemption on a real stack with declared memory (one CPU slot of 1.91 GB, real
training): a low job (batch 64) holds the slot; an urgent job arrives that fits beside it
only if the low job's batch shrinks. The low job is not evicted: it stops at its next
epoch boundary, its next segment is queued at once with the smaller batch and runs on the
same slot while the urgent job runs, and it completes with every epoch trained once."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from stack_helpers import json_lines, wait_final, write_spec, yoloq
from test_preemption_stack import submit, submit_while_frozen, wait_running

EPOCHS = 3
# yolov8n at imgsz 32: 0.95 GB fixed + 0.000248 GB per image (the analysis' estimate). The
# low job (batch 64, 0.97 GB) and the urgent one (0.95 GB) do not fit together in 1.91 GB;
# the low job at a batch of at most 37 does.
DECLARED = "1xCPU:1.91"


@pytest.fixture(scope="module")
def small_slot_stack(tmp_path_factory):
    """A private stack (the session's slot is 8 GB) whose `yoloq-policy` turns soft preemption
    on; this process's environment and Prefect settings are restored afterwards."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from blocks.policy import POLICY_BLOCK, SchedulingPolicy
    from yoloq.ops import stack as stack_mod

    patch = pytest.MonkeyPatch()
    for key in stack_mod._FOREIGN_ENV:
        patch.delenv(key, raising=False)
    for key, value in {"YOLOQ_HOME": str(tmp_path_factory.mktemp("soft-stack")),
                       "YOLOQ_PORT": str(stack_mod.free_port()), "YOLOQ_DECLARED_GPUS": DECLARED,
                       "YOLOQ_MIN_RUNTIME_S": "0", "YOLOQ_POLICY_REFRESH_S": "2",
                       "YOLOQ_USE_BLOCKS": "1"}.items():
        patch.setenv(key, value)
    try:
        stack = stack_mod.up(echo=lambda *a: None)
        with temporary_settings(updates={PREFECT_API_URL: stack.api_url}):
            SchedulingPolicy(soft_preemption=True, min_runtime_s=0).save(POLICY_BLOCK, _sync=True)
            yield stack
    finally:
        stack_mod.down(echo=lambda *a: None)
        patch.undo()


def _segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return sorted(segments_of(client, job_id), key=lambda r: r.created)


def _running_interval(run) -> tuple[float, float]:
    """(entered Running, left it) from the run's Prefect state history."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = sorted(client.read_flow_run_states(run.id), key=lambda s: s.timestamp)
    start = next(s.timestamp for s in states if s.is_running())
    end = next(s.timestamp for s in states if s.timestamp > start and s.is_final())
    return start.timestamp(), end.timestamp()


@pytest.mark.service
@pytest.mark.training
@pytest.mark.integration
def test_urgent_shares_the_low_jobs_slot_and_the_low_job_trains_on_with_a_smaller_batch(
        small_slot_stack, tiny_dataset, tmp_path):
    low_spec = write_spec(tmp_path / "low.yaml", tiny_dataset, name="low-soft", priority="low",
                          epochs=EPOCHS, segment_epochs=EPOCHS, batch=64, imgsz=32, export=[])
    urgent_spec = write_spec(tmp_path / "urgent.yaml", tiny_dataset, name="urgent-soft",
                             team="oncall", priority="urgent", epochs=2, segment_epochs=2,
                             batch=4, imgsz=32)
    low = submit(low_spec)
    victim = wait_running(low)
    urgent = submit_while_frozen(victim, urgent_spec)  # the low job stays in its first epoch till throttled
    assert wait_final(urgent)["state"] == "Completed"
    low_status = wait_final(low)
    assert low_status["state"] == "Completed" and low_status["epochs_done"] == EPOCHS

    first, *rest = _segments(low)
    labels = first.labels or {}
    batch = int(labels["yoloq.throttle"])
    assert 2 <= batch < 64 and "throttled" in labels["yoloq.preempt_reason"], labels
    assert first.state.name == "Preempted"
    successor = rest[0]  # queued at once with the smaller batch, back on the shared slot
    assert successor.parameters["plan"]["throttle_batch"] == batch
    assert (successor.labels or {}).get("yoloq.batch") == str(batch), successor.labels
    [urgent_segment] = _segments(urgent)
    place = lambda run: (run.labels["yoloq.node"], run.labels["yoloq.gpus"])
    assert place(successor) == place(urgent_segment) == place(first)
    (a0, a1), (b0, b1) = _running_interval(successor), _running_interval(urgent_segment)
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0, f"the two jobs never ran together on the slot ({overlap:.1f} s)"

    _assert_recorded(low, batch)


def _assert_recorded(job_id: str, batch: int) -> None:
    """Each epoch trained once; the batch change is on the MLflow run and in `yoloq history`."""
    from mlflow.tracking import MlflowClient

    from blocks import stores
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    assert trainings_per_epoch(epoch_trainings(job_id)) == {e: 1 for e in range(1, EPOCHS + 1)}
    uri, experiment = stores.mlflow_tracking_uri()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    [run] = client.search_runs([exp.experiment_id], filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    expected = f"batch 64 -> {batch}, accumulate 1 -> {max(round(64 / batch), 1)}"
    assert run.data.tags["yoloq.throttled"].startswith(expected), run.data.tags
    assert run.data.tags["yoloq.reduced_batch"] == str(batch)
    history = json_lines(yoloq("history", job_id, "--json").stdout)
    [preempted] = [r for r in history if r["what"] == "preempted"]
    assert "throttled" in preempted["detail"] and f"-> {batch}" in preempted["detail"], preempted
    assert any(r["what"] == "resumed" and f"batch {batch}" in r["detail"] for r in history), history


def test_a_throttled_stop_hands_its_batch_and_slot_to_the_next_segment():
    """The pure halves of the mechanism: the next plan, and placing it back on the slot only
    beside the job it made room for and only when the declared memory holds both."""
    from types import SimpleNamespace as NS

    from test_board import view

    from flows.job import throttled_plan
    from work_pools.inventory import GpuInfo
    from work_pools.pool_scheduler import PoolGpus, _rejoin_shared_gpu
    from work_pools.scheduling import Admit, WorkerDecision

    labels = {"yoloq.throttle": "37", "yoloq.throttle_gpu": "n1:0", "yoloq.preempted_by": "urg"}
    plan = {"fixed_mem_gb": 0.9506, "mem_per_image_gb": 0.000248, "est_mem_gb": 0.97, "batch": 64}
    assert throttled_plan(NS(labels=labels, state=NS(name="Completed")), plan, "yolov8n.yaml") is None
    nxt = throttled_plan(NS(labels=labels, state=NS(name="Preempted")), plan, "yolov8n.yaml")
    assert nxt["batch"] == nxt["throttle_batch"] == 37 and nxt["throttle_for"] == "urg"
    assert nxt["est_mem_gb"] == pytest.approx(0.9506 + 37 * 0.000248)
    pool = PoolGpus((GpuInfo(0, "CPU-0", "CPU", 1.91, 1.91, kind="declared"),), {0: ("n1", 0)},
                    {("n1", 0): 0})
    guest, other = view("urg.s1", est_mem_gb=0.95), view("oth.s1", est_mem_gb=0.95)
    successor = view("low.s2", est_mem_gb=nxt["est_mem_gb"])
    views = {v.flow_run_id: v for v in (guest, other, successor)}
    pending = [NS(id=successor.flow_run_id, parameters={"plan": {**plan, **nxt}})]
    admitted = WorkerDecision((Admit(guest.flow_run_id, (0,), "urgent"),), (), {}, None)
    none = WorkerDecision((), (), {}, None)
    [back] = _rejoin_shared_gpu(pending, admitted, pool, views, {})
    assert (back.flow_run_id, back.gpus, back.batch) == (successor.flow_run_id, (0,), 37)
    assert _rejoin_shared_gpu(pending, none, pool, views, {guest.flow_run_id: (0,)})
    assert not _rejoin_shared_gpu(pending, none, pool, views, {})  # empty slot: `decide` places
    assert not _rejoin_shared_gpu(pending, none, pool, views, {other.flow_run_id: (0,)})
    bigger = replace(guest, est_mem_gb=0.96)  # the two would not fit
    assert not _rejoin_shared_gpu(pending, admitted, pool, {**views, guest.flow_run_id: bigger}, {})

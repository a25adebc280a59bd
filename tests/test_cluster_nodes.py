"""One scheduler for a pool of three node agents, on the cluster profile's real services
(Prefect on PostgreSQL, checkpoints in Swift S3, an MLflow server).

Nodes (declared slots, all on this host): `a` 1xA100-80GB:80 (started by `yoloq up`, so it
takes the scheduler lease first), `b` 1xV100-32GB:32 via `yoloq node`, and `c` 1xCPU:8 via
`prefect worker start --pool yolo-gpu --type yolo-gpu --name c`.
Running jobs are frozen (SIGSTOP) while the scheduler acts, so what it decides does not
race this machine's speed; every epoch of every job is counted from the epoch ledger.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cluster_helpers import (cluster_pool, leader, live_nodes, pool_diagnostics, pool_segments,
                             times_started)
from stack_helpers import freeze, thaw, wait_final, wait_for, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.service, pytest.mark.training,
              pytest.mark.timeout(1800)]

LEASE_S = 60.0  # Prefect's smallest lease
REPOSSESSOR_S = 2.0  # the cluster profile's repossessor loop


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pool")
    with cluster_pool(tmp, "a", "1xA100-80GB:80") as pool:
        wait_for(lambda: leader() and leader()["holder"] == "a", "node a to lead")
        pool.start_node("b", "1xV100-32GB:32")
        pool.start_prefect_worker("c", "1xCPU:8")  # the same agent through Prefect's CLI
        wait_for(lambda: {n.name for n in live_nodes()} == {"a", "b", "c"}, "three live nodes", 180)
        yield pool


def _segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def _running(job_id: str):
    from work_pools.processes import recorded_pid

    seg = next((s for s in _segments(job_id) if s.state and s.state.is_running()), None)
    return seg if seg is not None and recorded_pid(seg.id) is not None else None


def _frozen_when_running(job_id: str):
    """(segment, PID) of the job's running segment, stopped with SIGSTOP; None while it has
    none (or it ended between the read and the signal)."""
    seg = _running(job_id)
    if seg is None:
        return None
    try:
        return seg, freeze(seg.id)
    except (AssertionError, ProcessLookupError):
        return None


def _node(seg) -> str:
    return (seg.labels or {}).get("yoloq.node", "")


def _asked(seg) -> bool:
    return (seg.labels or {}).get("yoloq.preempt") == "requested"


def _spec(pool, tmp: Path, name: str, tier: str, epochs: int, data: Path, **kw) -> Path:
    return write_spec(tmp / f"{name}.yaml", data, name=name, priority=tier, epochs=epochs,
                      segment_epochs=epochs, export=[], **kw)


def _trainings(job_id: str) -> dict[int, int]:
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    return trainings_per_epoch(epoch_trainings(job_id))


def _complete(pool, job_id: str, epochs: int) -> dict:
    status = wait_final(job_id, 900, cli=pool.cli)
    assert status["state"] == "Completed", status
    assert _trainings(job_id) == {e: 1 for e in range(1, epochs + 1)}, "each epoch trained once"
    return status


def test_a_free_gpu_is_used_first_then_urgent_preempts_only_the_cheapest_victim(pool, tiny_dataset,
                                                                               tmp_path):
    """A low job runs on one node, two nodes are free: an urgent job lands on a free node and
    nobody is preempted. Then all three nodes busy (low on one, normal on two): a second
    urgent job preempts the low job and nothing else. Running jobs are frozen meanwhile."""
    low = pool.submit(_spec(pool, tmp_path, "low", "low", 2, tiny_dataset))
    low_seg = wait_for(lambda: _running(low), "the low job to run")
    frozen = [freeze(low_seg.id)]
    try:
        first = pool.submit(_spec(pool, tmp_path, "urgent1", "urgent", 1, tiny_dataset))
        first_seg = wait_for(lambda: _running(first) or _done(first), "the first urgent job to run")
        assert _node(first_seg) != _node(low_seg)
        assert not any(_asked(s) for s in _segments(low)), "nobody was preempted for a free GPU"
        _complete(pool, first, 1)

        normals = [pool.submit(_spec(pool, tmp_path, f"normal{i}", "normal", 2, tiny_dataset))
                   for i in (1, 2)]
        normal_segs = []
        for j in normals:  # each frozen as soon as it runs: a 2-epoch job ends in seconds
            seg, pid = wait_for(lambda j=j: _frozen_when_running(j), f"{j} to run")
            normal_segs.append(seg)
            frozen.append(pid)
        assert {_node(low_seg), *map(_node, normal_segs)} == {"a", "b", "c"}

        urgent = pool.submit(_spec(pool, tmp_path, "urgent2", "urgent", 1, tiny_dataset))
        try:
            wait_for(lambda: any(_asked(s) for j in (low, *normals) for s in _segments(j)),
                     "a preemption")
        except AssertionError as exc:  # say why: the board's reason for urgent2, the nodes, ...
            raise AssertionError(f"{exc}\n{pool_diagnostics(pool, [urgent, low, *normals])}") from None
        time.sleep(5)  # several more scheduler passes: a second preemption would show now
        asked = {j: [s.name for s in _segments(j) if _asked(s)] for j in (low, *normals)}
    finally:
        for pid in frozen:
            thaw(pid)
    assert len(asked[low]) == 1 and not asked[normals[0]] and not asked[normals[1]], asked

    for job_id, epochs in ((urgent, 1), (low, 2), *((j, 2) for j in normals)):
        _complete(pool, job_id, epochs)
    # Where the urgent job then runs is whichever GPU frees first (the victim's, or a normal
    # job's that ended before the victim reached its boundary): the rule is the one preemption.
    [urgent_seg] = _segments(urgent)
    assert _node(urgent_seg) in {"a", "b", "c"}
    assert [len(_segments(j)) for j in normals] == [1, 1], "the normal jobs were never stopped"
    assert len(_segments(low)) == 2, "the low job resumed once"


def _done(job_id: str):
    return next((s for s in _segments(job_id) if s.state and s.state.is_completed()), None)


def test_a_job_too_big_for_the_v100_waits_for_the_a100_or_runs_reduced(pool, tiny_dataset,
                                                                       tmp_path):
    """yolov8n at 320 px, batch 1600: about 40 GB by the analysis' memory model (8 images, so
    it trains fast here). It fits node a's A100-80GB, not node b's V100-32GB. Reduced batch
    off: it waits for the A100. On: it runs on the V100 at the largest batch that fits,
    recorded on its run and in its history."""
    big = dict(imgsz=320, batch=1600)
    holder = pool.submit(_spec(pool, tmp_path, "holder", "high", 1, tiny_dataset, **big))
    holder_seg = wait_for(lambda: _running(holder), "the holder to run")
    assert _node(holder_seg) == "a", "only the A100 fits a 40 GB job"
    pid = freeze(holder_seg.id)
    try:
        waits = pool.submit(_spec(pool, tmp_path, "waits", "normal", 1, tiny_dataset, **big))
        time.sleep(8)
        assert not any(_node(s) for s in _segments(waits)), "it must not start on a small GPU"
    finally:
        thaw(pid)
    _complete(pool, holder, 1)
    _complete(pool, waits, 1)
    [seg] = _segments(waits)
    assert _node(seg) == "a" and not (seg.labels or {}).get("yoloq.batch")

    _save_policy(allow_reduced_batch=True)
    holder2 = pool.submit(_spec(pool, tmp_path, "holder2", "high", 1, tiny_dataset, **big))
    holder2_seg = wait_for(lambda: _running(holder2), "the second holder to run")
    assert _node(holder2_seg) == "a"
    pid = freeze(holder2_seg.id)
    try:
        reduced = pool.submit(_spec(pool, tmp_path, "reduced", "normal", 1, tiny_dataset, **big))
        seg = wait_for(lambda: next((s for s in _segments(reduced) if _node(s)), None),
                       "the reduced job to be placed")
    finally:
        thaw(pid)
    assert _node(seg) == "b"
    batch = int(seg.labels["yoloq.batch"])
    assert 800 < batch < 1600, batch
    _complete(pool, holder2, 1)
    _complete(pool, reduced, 1)
    history = pool.cli("history", reduced)
    assert f"batch {batch} (reduced to fit)" in history.stdout, history.stdout
    assert _mlflow_tag(reduced, "yoloq.reduced_batch") == str(batch)
    _save_policy(allow_reduced_batch=False)


def _save_policy(**changes) -> None:
    from blocks.policy import SchedulingPolicy

    SchedulingPolicy(min_runtime_s=0, **changes).save("yoloq-policy", overwrite=True)
    time.sleep(4)  # the leader re-reads it every YOLOQ_POLICY_REFRESH_S (2 s)


def _mlflow_tag(job_id: str, key: str) -> str | None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(os.environ["YOLOQ_MLFLOW_URI"])
    exp = client.get_experiment_by_name("yoloq")
    [run] = client.search_runs([exp.experiment_id], filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
    return run.data.tags.get(key) or run.data.params.get(key)


def test_a_standby_takes_over_when_the_leader_is_killed(pool, tiny_dataset, tmp_path):
    """SIGKILL the leading node agent (idle): a standby holds the lease within the lease time
    plus the repossessor loop and a poll; the pool keeps scheduling; nothing started twice.
    The leader is node a at the start, unless a renewal came too late on a loaded host and
    another node took over: whichever node leads is the one killed."""
    first = leader()
    assert first is not None and first["holder"] in ("a", "b", "c"), first
    dead = first["holder"]
    killed_at = time.monotonic()
    os.kill(int(first["pid"]), signal.SIGKILL)
    new = wait_for(lambda: (leader() or {}).get("holder") not in (None, dead) and leader(),
                   "a new leader", timeout_s=LEASE_S * 3)
    took = time.monotonic() - killed_at
    print(f"\nleader {dead} killed, {new['holder']} took over after {took:.1f} s "
          f"(lease {LEASE_S:.0f} s)")
    assert took <= LEASE_S + REPOSSESSOR_S + 30, took  # lease + loop + polls, with slack
    assert new["holder"] in {"a", "b", "c"} - {dead}

    after = pool.submit(_spec(pool, tmp_path, "after", "normal", 1, tiny_dataset))
    _complete(pool, after, 1)
    assert _node(_segments(after)[0]) != dead, "the dead node gets nothing"
    starts = {s.name: times_started(s.id) for s in pool_segments()}
    assert starts and max(starts.values()) <= 1, {k: v for k, v in starts.items() if v > 1}


def test_a_lost_node_is_drained_and_its_job_resumes_elsewhere(pool, tiny_dataset, tmp_path):
    """SIGKILL a node agent and its segment mid-training (the host died): once its heartbeat
    lapses the scheduler marks the segment Crashed, and the job resumes on another node from
    the shared checkpoint store with no command typed; at most one epoch is retrained."""
    from work_pools.processes import recorded_pid

    job = pool.submit(_spec(pool, tmp_path, "lost", "normal", 3, tiny_dataset))
    seg = wait_for(lambda: (s := _running(job)) and int((s.labels or {}).get("yoloq.epoch", 0)) >= 1
                   and s, "the job to finish its first epoch", timeout_s=900)
    node = _node(seg)
    [agent] = [n for n in live_nodes() if n.name == node]
    os.killpg(os.getpgid(agent.pid), signal.SIGKILL)  # the agent's session: the host is gone
    os.killpg(os.getpgid(recorded_pid(seg.id)), signal.SIGKILL)  # and its segment with it
    lost_at = time.monotonic()
    crashed = wait_for(lambda: next((s for s in _segments(job) if s.id == seg.id and s.state
                                     and s.state.is_crashed()), None), "the drain", 300)
    print(f"\nnode {node} lost: segment drained after {time.monotonic() - lost_at:.1f} s")
    assert f"Node {node} lost" in (crashed.state.message or "")
    status = wait_final(job, 900, cli=pool.cli)
    assert status["state"] == "Completed", status
    later = [s for s in _segments(job) if s.id != seg.id and _node(s)]
    assert later and all(_node(s) != node for s in later), "it resumed on another node"
    counts = _trainings(job)
    assert sorted(counts) == [1, 2, 3] and sum(counts.values()) - 3 <= 1, counts

"""Load on one scheduler: 60 tiny real jobs from four teams (weights 2:1:1:1), mixed tiers,
onto three node agents of two declared slots each, on the cluster profile's real services.

Every team submits the same tier mix, so weighted fair share decides the shares inside
each tier. Checked from Prefect's run records and the epoch ledger: all jobs complete;
every epoch of every job is trained exactly once; each team's usage as `yoloq usage`
reports it equals the sum of its segments' GPU-seconds x speed; over the contended
interval the realised shares are within 15% of the weights; and no preemption is wasted
(each preemptor job caused at most one preemption, and no victim was asked twice).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_helpers import cluster_pool, live_nodes, pool_segments
from stack_helpers import wait_for, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.service, pytest.mark.training,
              pytest.mark.timeout(2700)]

JOBS = 60
WEIGHTS = {"a": 2.0, "b": 1.0, "c": 1.0, "d": 1.0}
TIER_MIX = ["urgent"] + ["high"] * 2 + ["normal"] * 4 + ["low"] * 3


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, tiny_dataset):
    tmp = tmp_path_factory.mktemp("load")
    with cluster_pool(tmp, "n1", "2xCPU:8") as pool:
        pool.start_node("n2", "2xCPU:8")
        pool.start_node("n3", "2xCPU:8")
        wait_for(lambda: len(live_nodes()) == 3, "three live nodes", 180)
        from blocks.policy import SchedulingPolicy

        SchedulingPolicy(team_weights=WEIGHTS, min_runtime_s=0).save("yoloq-policy", overwrite=True)
        specs = [_spec(tmp, i, tiny_dataset) for i in range(JOBS)]
        out = pool.cli("submit", *map(str, specs), "--json", timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
        jobs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        ids = {j["job_id"]: _team_tier(i) for i, j in enumerate(jobs)}
        assert len(ids) == JOBS
        wait_for(lambda: _all_ended(pool, ids), "all jobs to end", timeout_s=2400, every_s=5)
        yield pool, ids


def _team_tier(i: int) -> tuple[str, str]:
    teams = sorted(WEIGHTS)
    return teams[i % len(teams)], TIER_MIX[(i // len(teams)) % len(TIER_MIX)]


def _spec(tmp: Path, i: int, data: Path) -> Path:
    team, tier = _team_tier(i)
    return write_spec(tmp / f"job{i:02d}.yaml", data, name=f"load{i:02d}", team=team,
                      priority=tier, epochs=1, segment_epochs=1, export=[])


def _all_ended(pool, ids) -> bool:
    out = pool.cli("status", "--json")
    if out.returncode != 0:
        return False
    states = {j["job_id"]: j["state"] for j in json.loads(out.stdout)}
    return all(states.get(j) in ("Completed", "Failed", "Cancelled", "Crashed") for j in ids)


def _segments_by_job(ids) -> dict[str, list]:
    by_job: dict[str, list] = {j: [] for j in ids}
    for seg in pool_segments():
        job = (seg.parameters or {}).get("job_id")
        if job in by_job:
            by_job[job].append(seg)
    return by_job


def test_all_jobs_complete_and_every_epoch_is_trained_once(loaded):
    from yoloq.jobs import epoch_trainings, trainings_per_epoch

    pool, ids = loaded
    states = {j["job_id"]: j["state"] for j in json.loads(pool.cli("status", "--json").stdout)}
    assert [j for j in ids if states.get(j) != "Completed"] == []
    repeats = {j: c for j in ids if (c := trainings_per_epoch(epoch_trainings(j))) != {1: 1}}
    assert repeats == {}, repeats


def test_usage_equals_the_segments_gpu_seconds_times_speed(loaded):
    pool, ids = loaded
    out = pool.cli("usage", "--since", "1d", "--json")
    assert out.returncode == 0, out.stderr
    reported: dict[str, float] = {}
    for row in json.loads(out.stdout):
        reported[row["team"]] = reported.get(row["team"], 0.0) + row["tu"]
    expected: dict[str, float] = {}
    for job, segs in _segments_by_job(ids).items():
        for seg in segs:
            if seg.start_time is None or seg.end_time is None:
                continue
            labels = seg.labels or {}
            gpus = len(labels["yoloq.gpus"].split(","))
            seconds = (seg.end_time - seg.start_time).total_seconds()
            expected[ids[job][0]] = expected.get(ids[job][0], 0.0) + (
                gpus * seconds * float(labels["yoloq.gpu_speed"]) / 86400.0)
    assert set(reported) == set(WEIGHTS)
    for team in WEIGHTS:
        assert reported[team] == pytest.approx(expected[team], rel=1e-3, abs=1e-6), team


def test_realised_shares_follow_the_weights_while_contended(loaded):
    _, ids = loaded
    spans = [((seg.parameters or {}).get("job_id"), seg.start_time.timestamp(),
              seg.end_time.timestamp()) for segs in _segments_by_job(ids).values() for seg in segs
             if seg.start_time is not None and seg.end_time is not None]
    start = min(s for _, s, _ in spans)
    end = min(max(e for job, _, e in spans if ids[job][0] == team) for team in WEIGHTS)
    used = {team: sum(max(0.0, min(e, end) - max(s, start)) for job, s, e in spans
                      if ids[job][0] == team) for team in WEIGHTS}
    total = sum(used.values())
    shares = {t: used[t] / total for t in WEIGHTS}
    wanted = {t: WEIGHTS[t] / sum(WEIGHTS.values()) for t in WEIGHTS}
    print(f"\ncontended {end - start:.0f} s; shares {shares}; weights {wanted}")
    for team in WEIGHTS:
        assert abs(shares[team] - wanted[team]) <= 0.15 * wanted[team], (team, shares, wanted)


def test_no_preemption_is_wasted(loaded):
    _, ids = loaded
    victims = [seg for segs in _segments_by_job(ids).values() for seg in segs
               if (seg.labels or {}).get("yoloq.preempt") == "requested"]
    by_preemptor: dict[str, int] = {}
    for seg in victims:
        by_preemptor[seg.labels["yoloq.preempted_by"]] = by_preemptor.get(seg.labels["yoloq.preempted_by"], 0) + 1
    print(f"\npreemptions done {len(victims)}, preemptor jobs {len(by_preemptor)}")
    assert all(n == 1 for n in by_preemptor.values()), by_preemptor
    for seg in victims:
        victim_tier, preemptor_job = ids[seg.parameters["job_id"]][1], seg.labels["yoloq.preempted_by"]
        assert _rank(ids[preemptor_job][1]) < _rank(victim_tier), (preemptor_job, victim_tier)


def _rank(tier: str) -> int:
    return ["urgent", "high", "normal", "low"].index(tier)

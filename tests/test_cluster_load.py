"""Load on one scheduler: 60 tiny real jobs from four teams (weights 2:1:1:1), mixed tiers,
onto three node agents of two declared slots each, on the cluster profile's real services
(Prefect on PostgreSQL, checkpoints in Swift S3, an MLflow server).

Jobs per team are in proportion to the weights (a 24, b c d 12 each), interleaved as
submitted, with the same tiers in the same proportions per team (`load_team_tier`), so the
shares can follow the weights while every team has work. Checked from Prefect's run records
and the epoch ledger (trainings, not MLflow steps): all jobs complete; every epoch of every
job is trained exactly once; each team's usage (the scheduler's usage book, what `yoloq
usage` shows) equals the sum of its segments' GPU-seconds x speed within 0.1%; over the
contended interval (first segment start until the first team has nothing left to run) the
realised shares are within 15% of the weights; and preemptions done equal preemptions
needed: each job that preempted needed one slot (all jobs are single-GPU), so a preemption
is wasted when a job caused more than one. `python bench/cluster.py` runs the same scenario
and prints the figures.
"""

from __future__ import annotations

import time

import pytest

from cluster_helpers import LOAD_WEIGHTS, load_figures, load_pool, submit_load, wait_load

pytestmark = [pytest.mark.integration, pytest.mark.service, pytest.mark.training,
              pytest.mark.timeout(2400)]  # CI hosts have taken 1,000-1,400 s

JOBS, NODES, SLOTS = 60, 3, 2


@pytest.fixture(scope="module")
def figures(tmp_path_factory, tiny_dataset):
    tmp = tmp_path_factory.mktemp("load")
    began = time.monotonic()
    with load_pool(tmp, NODES, SLOTS) as pool:
        ready = time.monotonic()
        ids = submit_load(pool, tmp, tiny_dataset, JOBS)
        submitted = time.monotonic()
        wait_load(pool, ids, timeout_s=2000)
        ended = time.monotonic()
        found = load_figures(pool, ids)
    print(f"\npool up {ready - began:.0f} s, submit {submitted - ready:.0f} s, "
          f"all ended {ended - ready:.0f} s after the submit began\n{found.table()}")
    return found


def test_all_jobs_complete_and_every_epoch_is_trained_once(figures):
    assert [j for j, s in figures.states.items() if s != "Completed"] == []
    assert figures.repeats == {}


def test_usage_equals_the_segments_gpu_seconds_times_speed(figures):
    assert set(figures.usage_reported) == set(LOAD_WEIGHTS)
    for team in LOAD_WEIGHTS:
        assert figures.usage_reported[team] == pytest.approx(
            figures.usage_expected[team], rel=1e-3), team


def test_realised_shares_follow_the_weights_while_contended(figures):
    errors = {team: figures.share_error(team) for team in LOAD_WEIGHTS}
    assert all(e <= 0.15 for e in errors.values()), (errors, figures.shares, figures.wanted)


def test_preemptions_done_equal_preemptions_needed(figures):
    print(f"\npreemptions (preemptor tier, victim tier): {figures.preemption_tiers}")
    assert figures.preemptions_done == figures.preemptions_needed, figures.per_preemptor

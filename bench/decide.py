"""Time one `decide` call: 10,000 waiting segments on 256 GPUs, fair share and quotas on.

    python bench/decide.py [--waiting 10000] [--gpus 256] [--repeat 30]

The cluster is mixed (A100-80GB, H100-80GB, V100-32GB, L4-24GB); 200 GPUs run a
segment, the rest are free; the queue spreads over 8 teams and 4 tiers, one
team is over its quota, and a share of the waiting segments are old enough
to be aged. The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from work_pools.policy import Policy, Quota, Segment, Snapshot, decide  # noqa: E402
from work_pools.policy.builders import make_gpus  # noqa: E402
from yoloq.tiers import Tier  # noqa: E402

NOW = 1_000_000.0
TEAMS = [f"team{i}" for i in range(8)]


def build(waiting: int, gpus: int, seed: int = 0) -> tuple[Snapshot, Policy]:
    rng = random.Random(seed)
    quarter = gpus // 4
    spec = (f"{quarter}xA100-80GB,{quarter}xH100-80GB,{quarter}xV100-32GB,"
            f"{gpus - 3 * quarter}xL4-24GB")
    cluster = list(make_gpus(spec))
    running = []
    busy = rng.sample(range(gpus), min(200, gpus))
    for n, index in enumerate(busy):
        mem = min(cluster[index].mem_total_gb, rng.choice([4, 7, 12, 18, 26]))
        running.append(Segment(
            id=f"r{n}/s1", job_id=f"r{n}", team=rng.choice(TEAMS), tier=rng.choice(list(Tier)),
            submitted_at=NOW - 9000, waiting_since=NOW - 5000, est_mem_gb=mem, gpu_indices=(index,),
            started_at=NOW - rng.uniform(0, 1200), last_checkpoint_at=NOW - rng.uniform(0, 300),
            epoch=rng.randint(0, 50), epochs=50))
        g = cluster[index]
        cluster[index] = type(g)(g.index, g.name, g.mem_total_gb, g.mem_total_gb - mem, g.speed, g.uuid)
    queue = [Segment(
        id=f"w{n}/s1", job_id=f"w{n}", team=rng.choice(TEAMS),
        tier=rng.choices(list(Tier), weights=[5, 15, 50, 30])[0],
        submitted_at=NOW - rng.uniform(0, 20000), waiting_since=NOW - rng.uniform(0, 15000),
        est_mem_gb=rng.choice([4, 7, 12, 18, 26, 40]), gpus=rng.choices([1, 2, 4, 8], [80, 10, 7, 3])[0],
        job_class=rng.choice(["short", "full"]), held_window_s=rng.uniform(0, 14400))
        for n in range(waiting)]
    usage = {t: rng.uniform(0, 50) for t in TEAMS}
    period = {t: rng.uniform(0, 20) for t in TEAMS} | {"team0": 25.0}
    policy = Policy(team_weights={t: 1.0 + i % 3 for i, t in enumerate(TEAMS)},
                    quotas={"team0": Quota(20.0), "team1": Quota(100.0, "week")})
    return Snapshot(tuple(cluster), tuple(running), tuple(queue), usage, period), policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    snapshot, policy = build(args.waiting, args.gpus)
    decision = decide(snapshot, policy, NOW)  # warm-up
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        decide(snapshot, policy, NOW)
        times.append(time.perf_counter() - start)
    times.sort()
    p50 = statistics.median(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(f"admitted {len(decision.admit)}, preempted {len(decision.preempt)}, "
          f"waiting {len(decision.waiting)}, quota breaches {len(decision.quota_breaches)}")
    print(f"decide with {args.waiting} waiting on {args.gpus} GPUs "
          f"({len(snapshot.running)} running), {args.repeat} calls: "
          f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms")


if __name__ == "__main__":
    main()

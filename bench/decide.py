"""Time one `decide` call: 10,000 waiting segments on 256 GPUs over 32 nodes, fair share
and quotas on.

    python bench/decide.py [--waiting 10000] [--gpus 256] [--nodes 32] [--repeat 30]
                           [--baseline DIR]

The cluster is mixed (A100-80GB, H100-80GB, V100-32GB, L4-24GB), the GPUs dealt
round-robin onto `--nodes` nodes; 200 GPUs run a segment, the rest are free; the
queue spreads over 8 teams and 4 tiers (gangs of 2, 4 and 8 GPUs included), one
team is over its quota, and a share of the waiting segments are old enough to
be aged. The last line is the headline figure.

`--baseline DIR` times, interleaved in the same run, the `decide` of another copy
of the code (e.g. `git archive <commit> work_pools yoloq | tar -x -C DIR`) on the
same queue (every GPU on one node when that code has no nodes), and prints the
ratio: the machine is shared, so only side-by-side figures compare.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
import sys
from dataclasses import replace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from work_pools.policy import Policy, Quota, Segment, Snapshot, decide  # noqa: E402
from tests.builders import make_gpus  # noqa: E402
from yoloq.domain.tiers import Tier  # noqa: E402

NOW = 1_000_000.0
TEAMS = [f"team{i}" for i in range(8)]


def build(waiting: int, gpus: int, seed: int = 0, nodes: int = 32) -> tuple[Snapshot, Policy]:
    rng = random.Random(seed)
    quarter = gpus // 4
    spec = (f"{quarter}xA100-80GB,{quarter}xH100-80GB,{quarter}xV100-32GB,"
            f"{gpus - 3 * quarter}xL4-24GB")
    cluster = _on_nodes(list(make_gpus(spec)), nodes)
    running = []
    busy = rng.sample(range(gpus), min(200, gpus))
    for n, index in enumerate(busy):
        mem = min(cluster[index].mem_total_gb, rng.choice([4, 7, 12, 18, 26]))
        g = cluster[index]
        running.append(Segment(
            id=f"r{n}/s1", job_id=f"r{n}", team=rng.choice(TEAMS), tier=rng.choice(list(Tier)),
            submitted_at=NOW - 9000, waiting_since=NOW - 5000, est_mem_gb=mem, gpu_indices=(g.index,),
            started_at=NOW - rng.uniform(0, 1200), last_checkpoint_at=NOW - rng.uniform(0, 300),
            epoch=rng.randint(0, 50), epochs=50, **_node_kw(g)))
        cluster[index] = replace(g, mem_free_gb=g.mem_total_gb - mem)
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


def _on_nodes(gpus: list, nodes: int) -> list:
    """Deal the GPUs round-robin onto `nodes` nodes; indices restart at 0 on each node."""
    if nodes <= 1:
        return gpus
    counts: dict[str, int] = {}
    out = []
    for n, g in enumerate(gpus):
        node = f"node{n % nodes:02d}"
        out.append(replace(g, node=node, index=counts.setdefault(node, 0)))
        counts[node] += 1
    return out


def _node_kw(gpu) -> dict:
    node = getattr(gpu, "node", None)
    return {} if node is None or node == "local" else {"node": node}


def _time(fn, snapshot, policy, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(snapshot, policy, NOW)
        times.append(time.perf_counter() - start)
    return sorted(times)


def _p(times: list[float], q: float) -> float:
    return times[min(len(times) - 1, round(q * (len(times) - 1)))]


def _baseline(folder: str, waiting: int, gpus: int, nodes: int):
    """The other copy's `decide` and its own snapshot types (on one node if it has none)."""
    import importlib

    for name in [m for m in sys.modules if m.split(".")[0] in ("work_pools", "yoloq", "tests")]:
        del sys.modules[name]
    sys.path.insert(0, folder)
    try:
        old = importlib.import_module("work_pools.policy")
        builders = importlib.import_module(  # older copies kept the builders in the product
            "tests.builders" if (Path(folder) / "tests" / "builders.py").exists()
            else "work_pools.policy.builders")
        globals_backup = dict(globals())
        globals().update(Policy=old.Policy, Quota=old.Quota, Segment=old.Segment,
                         Snapshot=old.Snapshot, make_gpus=builders.make_gpus)
        has_nodes = "node" in getattr(old.Gpu, "__dataclass_fields__", {})
        snapshot, policy = build(waiting, gpus, nodes=nodes if has_nodes else 1)
        globals().update(globals_backup)
        return old.decide, snapshot, policy
    finally:
        sys.path.remove(folder)
        for name in [m for m in sys.modules if m.split(".")[0] in ("work_pools", "yoloq", "tests")]:
            del sys.modules[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--baseline", metavar="DIR", help="another copy of the code to compare")
    args = parser.parse_args()
    old = _baseline(args.baseline, args.waiting, args.gpus, args.nodes) if args.baseline else None
    snapshot, policy = build(args.waiting, args.gpus, nodes=args.nodes)
    decision = decide(snapshot, policy, NOW)  # warm-up
    times, old_times = [], []
    for _ in range(args.repeat):  # interleaved, so both see the same machine load
        times += _time(decide, snapshot, policy, 1)
        if old:
            old_times += _time(*old, 1)
    times.sort()
    old_times.sort()
    p50 = statistics.median(times)
    print(f"admitted {len(decision.admit)}, preempted {len(decision.preempt)}, "
          f"waiting {len(decision.waiting)}, quota breaches {len(decision.quota_breaches)}")
    if old:
        base = statistics.median(old_times)
        old_nodes = len({getattr(g, "node", "local") for g in old[1].gpus})
        print(f"baseline {args.baseline} ({old_nodes} nodes): p50 {base * 1000:.0f} ms, "
              f"p95 {_p(old_times, 0.95) * 1000:.0f} ms; this / baseline = {p50 / base:.2f}")
    print(f"decide with {args.waiting} waiting on {args.gpus} GPUs over {args.nodes} nodes "
          f"({len(snapshot.running)} running), {args.repeat} calls: "
          f"p50 {p50 * 1000:.0f} ms, p95 {_p(times, 0.95) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

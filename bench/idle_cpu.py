"""What an idle stack costs in CPU: the node agent's 1 s poll against the default 5 s fallback.

With Prefect's event stream waking the scheduling loops (`work_pools/events_wake.py`), the node
agent's poll (`PREFECT_WORKER_QUERY_SECONDS`) only covers a missed event. Each pass is a
heartbeat, a lease renewal, a read of the pool's runs and, on the leader, the scheduling reads,
all answered by the Prefect server. This bench starts a private embedded stack
(`yoloq.ops.stack.private_stack`: one declared slot `1xCPU:8`, minimum runtime 0, no job)
once per setting, in alternation, lets it settle, and sums the CPU time of every process of
the stack (server, job runner, GPU worker and its warm launcher, API) over a window.

Settings that differ from the defaults: the first mode sets `PREFECT_WORKER_QUERY_SECONDS=1`
(the poll before this change); the second is the default (5 s with the event wake on).

    .venv/bin/python bench/idle_cpu.py                    # 1 round, 30 s settle, 60 s window
    .venv/bin/python bench/idle_cpu.py --rounds 2 --window 30
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queue_scale import per_role  # noqa: E402  (bench/ is this script's folder)

MODES = {"poll 1 s (before)": "1", "poll 5 s (default)": "5"}


def stack_cpu_s(stack) -> dict[str, float]:
    """CPU seconds (user + system) so far of every process of the stack, by role."""
    times = per_role(stack, lambda proc: sum(proc.cpu_times()[:2]))
    return {role: sum(v) for role, v in times.items()}


def idle_share(poll_s: str, settle_s: float, window_s: float) -> dict[str, float]:
    """Share of one core per role while a fresh stack sits idle for `window_s`."""
    from yoloq.ops.stack import private_stack

    os.environ["PREFECT_WORKER_QUERY_SECONDS"] = poll_s
    with tempfile.TemporaryDirectory(prefix="yoloq-bench-idle-") as tmp:
        with private_stack(Path(tmp) / "home") as stack:
            time.sleep(settle_s)  # the launcher's imports, the server's first service loops
            before, began = stack_cpu_s(stack), time.monotonic()
            time.sleep(window_s)
            after, took = stack_cpu_s(stack), time.monotonic() - began
    return {role: (after[role] - before.get(role, 0.0)) / took for role in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before the window")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    args = parser.parse_args()
    totals: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode, poll_s in MODES.items():
            shares = idle_share(poll_s, args.settle, args.window)
            totals[mode].append(sum(shares.values()))
            parts = ", ".join(f"{role} {share:.1%}" for role, share in
                              sorted(shares.items(), key=lambda kv: -kv[1]) if share >= 0.001)
            print(f"round {r + 1}, {mode}: {sum(shares.values()):.1%} of one core ({parts})",
                  flush=True)
    means = {mode: sum(v) / len(v) for mode, v in totals.items()}
    print("| setting | idle stack, share of one core (mean) |\n|---|---|")
    for mode, mean in means.items():
        print(f"| {mode} | {mean:.1%} |")
    before, now = means.values()
    print(f"ratio default / before: {now / before:.2f}")


if __name__ == "__main__":
    main()

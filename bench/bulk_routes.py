"""Creating a bulk submission's runs: Prefect's bulk route against the server's Scheduled-runs route.

    .venv/bin/python bench/bulk_routes.py [--jobs 500] [--rounds 3]

Starts a private embedded stack (one declared slot) and pauses its job runner (SIGSTOP), so
nothing takes the runs while they are created and the server does nothing else. Each round
builds `--jobs` job runs exactly as `POST /v1/jobs/bulk` does (admission, the `yolo-job`
requests) and creates them twice, alternating which goes first: through Prefect's
`POST /deployments/{id}/create_flow_run/bulk` (100 runs per call, its limit) and through
`POST /yoloq/deployments/{id}/scheduled_runs` (500 per call, what yoloq uses). Prints, per
route, jobs per second of the creation alone and the server's CPU seconds for it, then the
ratio. The admission and the job events are the same for both and not counted.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

STOCK = ("Prefect's bulk route", "/deployments/{id}/create_flow_run/bulk", 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import psutil

    import scale
    from yoloq.base.names import SCHEDULED_RUNS_ROUTE
    from yoloq.datasets.synth import synth_dataset
    from yoloq.domain.spec import parse_spec
    from yoloq.ops.stack import _read_pid, api_settings, private_stack

    routes = [STOCK, ("yoloq's Scheduled-runs route", SCHEDULED_RUNS_ROUTE, 500)]
    home = Path(tempfile.mkdtemp(prefix="yoloq-bulk-routes-"))
    data = synth_dataset(home / "shapes", train=8, val=4, imgsz=64, seed=0)
    print(f"private stack in {home} (SQLite); job runner paused; {args.jobs} yolov8n.yaml jobs per route "
          f"and round, {args.rounds} rounds; Prefect's route at 100 runs per call, yoloq's at 500")
    took: dict[str, list[float]] = {name: [] for name, _, _ in routes}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in routes}
    with private_stack(home) as stack, api_settings(stack):
        os.killpg(os.getpgid(_read_pid(stack, "runner")), signal.SIGSTOP)
        server = psutil.Process(_read_pid(stack, "server"))
        specs = [parse_spec(scale.job_spec(data, "bench", i)) for i in range(args.jobs)]
        for number in range(args.rounds):
            for name, route, per_call in (routes if number % 2 == 0 else routes[::-1]):
                requests = job_requests(specs)
                seconds, server_s = create(route, per_call, requests, server)
                took[name].append(seconds)
                cpu[name].append(server_s)
                print(f"  round {number + 1}, {name}: {args.jobs / seconds:.1f} jobs/s "
                      f"({seconds:.2f} s, server CPU {server_s:.2f} s)", flush=True)
    print("\n| route | jobs/s (median) | server CPU ms per run |\n|---|---:|---:|")
    rates = {}
    for name, _, _ in routes:
        rates[name] = args.jobs / statistics.median(took[name])
        print(f"| {name} | {rates[name]:.1f} | {1000 * statistics.median(cpu[name]) / args.jobs:.1f} |")
    print(f"\nratio: {rates[routes[1][0]] / rates[STOCK[0]]:.1f}x the jobs per second")
    return 0


def job_requests(specs: list) -> list[dict]:
    """The `yolo-job` run requests of a bulk submission (`yoloq.service.bulk.submit_bulk`)."""
    from yoloq.service.admission import pool_context
    from yoloq.service.bulk import admit_all, run_requests
    from yoloq.service.connection import stack_client
    from yoloq.service.submission import new_job_id

    with stack_client() as client:
        verdicts = admit_all(specs, pool_context(client, None))
    return run_requests(specs, verdicts, [new_job_id(spec) for spec in specs])


def create(route: str, per_call: int, requests: list[dict], server) -> tuple[float, float]:
    """Create the runs through `route`; (wall seconds, server CPU seconds)."""
    from yoloq.base.names import JOB_DEPLOYMENT
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        deployment_id = client.read_deployment_by_name(JOB_DEPLOYMENT).id
        before = sum(server.cpu_times()[:2])
        began = time.perf_counter()
        for start in range(0, len(requests), per_call):
            response = client.request("POST", route, path_params={"id": deployment_id},
                                      json=requests[start:start + per_call])
            results = response.json()["results"]
            if any(r["status"] != "CREATED" for r in results):
                raise SystemExit(f"{route}: a run was not created: {results[:2]}")
        return time.perf_counter() - began, sum(server.cpu_times()[:2]) - before


if __name__ == "__main__":
    raise SystemExit(main())

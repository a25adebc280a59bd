"""Prefect's job-variable check per created run, stock against remembered (`yoloq/ops/server.py`).

    .venv/bin/python bench/job_variable_checks.py [--runs 200]

Calls the check Prefect's server runs for every run it creates from a deployment
(`validate_job_variables_for_deployment_flow_run`), with the real templates of yoloq's two pools
(the job runner's process pool and `yolo-gpu`) and the same job variables each time, as a bulk
submission's runs have: once as shipped, once through `job_variable_checks_remembered`. In-process,
no server or database (the templates name no block, so the check reads nothing). Prints ms per
run for both and their ratio; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_run_ms(check, template: dict, runs: int) -> float:
    pool = SimpleNamespace(name="pool", base_job_template=template)
    deployment = SimpleNamespace(id="d", work_queue=SimpleNamespace(work_pool=pool), job_variables={})
    run = SimpleNamespace(job_variables={"env": {"YOLOQ_JOB": "bench"}})

    async def loop() -> float:
        began = time.perf_counter()
        for _ in range(runs):
            await check(None, deployment, run)
        return (time.perf_counter() - began) / runs * 1000

    return asyncio.run(loop())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    from prefect.server.api import deployments
    from prefect.workers.process import ProcessWorker

    from work_pools.worker import YoloGpuWorker
    from yoloq.ops import server

    stock = deployments.validate_job_variables_for_deployment_flow_run
    server.job_variable_checks_remembered()
    remembered = deployments.validate_job_variables_for_deployment_flow_run
    result = {}
    for name, worker in (("process", ProcessWorker), ("yolo-gpu", YoloGpuWorker)):
        template = worker.get_default_base_job_template()
        shipped, kept = per_run_ms(stock, template, args.runs), per_run_ms(remembered, template, args.runs)
        print(f"{name:9} pool: stock {shipped:7.2f} ms/run   remembered {kept:6.3f} ms/run   "
              f"{shipped / kept:6.0f}x")
        result[name] = {"stock_ms": round(shipped, 3), "remembered_ms": round(kept, 4)}
    print(json.dumps({"runs": args.runs, **result}))


if __name__ == "__main__":
    main()

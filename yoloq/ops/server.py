"""Run the Prefect server for yoloq, offline.

The stock server fetches the collections registry (worker and block type metadata)
from raw.githubusercontent.com whenever the UI or `prefect work-pool create` asks for
it, and only then falls back to the copies bundled with Prefect. Here it reads the
bundled copies directly, so the server never tries the network. Otherwise this is
what `prefect server start` runs: the API, the UI and the background services in one
uvicorn process.
"""

from __future__ import annotations

import argparse
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from yoloq.base import offline

offline.apply()


async def bundled_collection_view(view: str) -> dict[str, Any]:
    from prefect.server.api import collections

    local = Path(collections.__file__).parent / "collections_data" / "views" / f"{view}.json"
    if view not in collections.KNOWN_VIEWS or not local.exists():
        raise KeyError(view)  # answered 404, as the stock server does offline
    return json.loads(local.read_text())


def database_outage_is_retryable() -> None:
    """Answer 503, not 500, while the database refuses connections (PostgreSQL restarting):
    Prefect's clients (engines, workers, the CLI) retry a 503 with backoff for about a
    minute, but fail at once on a 500. Prefect already answers 503 for a dropped connection."""
    from prefect.server.api import server

    stock = server.is_client_retryable_exception

    def retryable(exc: Exception) -> bool:
        return isinstance(exc, ConnectionError) or bool(stock(exc))

    server.is_client_retryable_exception = retryable


def sqlite_writes_begin_immediate() -> None:
    """Begin every SQLite write transaction IMMEDIATE, so it waits for the write lock.

    Prefect begins them DEFERRED: the first read takes a snapshot, and the first write then
    needs the lock. When another connection (the event persister, another request) committed
    in between, SQLite cannot upgrade that snapshot and fails at once with `database is locked`
    (its busy timeout does not apply), Prefect answers 503, and the client sleeps 2-4 s before
    it retries. Taking the lock at BEGIN makes such a transaction wait its turn instead.
    Transactions Prefect does not begin explicitly (its reads) are left as they are.
    """
    from prefect.server.database import configurations

    stock = configurations.AioSqliteConfiguration.begin_transaction

    def begin_transaction(self, session, with_for_update: bool = False):
        return stock(self, session, with_for_update=True)

    configurations.AioSqliteConfiguration.begin_transaction = begin_transaction


REMEMBERED_CHECKS = 256  # distinct (pool template, job variables) combinations remembered


def job_variable_checks_remembered() -> None:
    """Check a new deployment run's job variables once per distinct input, not once per run.

    Prefect checks every run it creates from a deployment against the work pool's variables
    schema: the schema against its meta-schema, every default, then the merged variables (the
    larger part of the server's time in a bulk submission; `bench/job_variable_checks.py`). The
    answer depends only on the pool's template and the deployment's and the run's job
    variables, so an accepted combination is remembered (the newest REMEMBERED_CHECKS). A refusal
    is never remembered, and a template or variables naming a block document (read from the
    database) are checked every time. Run updates (`flow_runs`) are left as they are.
    """
    from prefect.server.api import deployments

    stock = deployments.validate_job_variables_for_deployment_flow_run
    accepted: OrderedDict[str, None] = OrderedDict()

    async def remembered(session, deployment, flow_run) -> None:
        pool = deployment.work_queue.work_pool if deployment.work_queue else None
        if pool is None:
            return await stock(session, deployment, flow_run)
        key = json.dumps([pool.name, pool.base_job_template, deployment.job_variables or {},
                          flow_run.job_variables or {}], sort_keys=True, default=str)
        if key in accepted:
            accepted.move_to_end(key)
            return None
        await stock(session, deployment, flow_run)
        if '"block_document_id"' not in key:
            accepted[key] = None
            while len(accepted) > REMEMBERED_CHECKS:
                accepted.popitem(last=False)
        return None

    deployments.validate_job_variables_for_deployment_flow_run = remembered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    import uvicorn
    from prefect.server.api import collections
    from prefect.server.api.server import create_app

    from yoloq.ops import scheduled_runs

    collections.get_collection_view = bundled_collection_view
    database_outage_is_retryable()
    sqlite_writes_begin_immediate()
    job_variable_checks_remembered()
    scheduled_runs.install()
    uvicorn.run(app=create_app(final=True), host=args.host, port=args.port, log_level="info",
                timeout_keep_alive=5)


if __name__ == "__main__":
    main()

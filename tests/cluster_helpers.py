"""A multi-node pool on the cluster profile's real services, for the scheduler tests:
Prefect on PostgreSQL, checkpoints in Swift S3, an MLflow server with S3 artifacts, the
embedded stack's node agent plus more node agents started with `yoloq node` (declared
slots, all on this host, sharing nothing but the services)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

SERVICES = Path(__file__).resolve().parents[1] / "profiles" / "cluster" / "services.sh"


def cluster_services() -> dict[str, str]:
    """Start (idempotently) S3 and PostgreSQL with the project's script; their settings."""
    for service in ("s3", "postgres"):
        started = subprocess.run(["bash", str(SERVICES), "start", service], capture_output=True,
                                 text=True, timeout=600)
        assert started.returncode == 0, started.stderr[-2000:]
    printed = subprocess.run(["bash", str(SERVICES), "env"], capture_output=True, text=True,
                             check=True).stdout
    env = {}
    for line in printed.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value.strip("'")
    return env


def fresh_database(url: str, name: str) -> str:
    """A new, empty database beside the one in `url` (its URL): pools never share a schema,
    so two test runs on one PostgreSQL cannot reset each other's server."""
    import asyncio

    import asyncpg

    async def create() -> None:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return url.rsplit("/", 1)[0] + f"/{name}"


def reset_prefect_database(url: str) -> None:
    """A clean schema, so runs left by an earlier session are not recovered into this one."""
    import asyncio

    import asyncpg

    async def reset() -> None:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public;")
        finally:
            await conn.close()

    asyncio.run(reset())


@dataclass
class Pool:
    env: dict[str, str]
    home: Path
    logs: Path
    agents: dict[str, subprocess.Popen] = field(default_factory=dict)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=self.env)

    def start_node(self, name: str, declared: str) -> subprocess.Popen:
        env = {**self.env, "YOLOQ_DECLARED_GPUS": declared}
        env.pop("YOLOQ_NODE_NAME", None)
        log = open(self.logs / f"node-{name}.log", "ab")
        agent = subprocess.Popen([sys.executable, "-m", "yoloq.cli", "node", "--name", name],
                                 env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.agents[name] = agent
        return agent

    def start_prefect_worker(self, name: str, declared: str) -> subprocess.Popen:
        """The same node agent through Prefect's own CLI: `prefect worker start --type yolo-gpu`."""
        from yoloq.ops.stack import current_stack, stack_env

        env = {**stack_env(current_stack()), **self.env, "YOLOQ_DECLARED_GPUS": declared}
        env.pop("YOLOQ_NODE_NAME", None)
        log = open(self.logs / f"node-{name}.log", "ab")
        agent = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool",
                                  "yolo-gpu", "--type", "yolo-gpu", "--name", name], env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.agents[name] = agent
        return agent

    def submit(self, spec: Path) -> str:
        out = self.cli("submit", str(spec), "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["job_id"]


@contextmanager
def cluster_pool(tmp: Path, first_node: str, first_declared: str) -> Iterator[Pool]:
    """`yoloq up` on the cluster profile with node agent `first_node`; more via start_node."""
    from yoloq.ops import mlflow_server
    from yoloq.ops.stack import free_port

    services = cluster_services()
    run = uuid.uuid4().hex[:8]
    services["PREFECT_API_DATABASE_CONNECTION_URL"] = fresh_database(
        services["PREFECT_API_DATABASE_CONNECTION_URL"], f"prefect_pool_{run}")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PREFECT_", "YOLOQ_CHECKPOINT", "YOLOQ_MLFLOW", "YOLOQ_NODE"))}
    base.update(services)
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    mlflow_port = free_port()
    server = mlflow_server.start(mlflow_port, f"sqlite:///{tmp / 'mlflow.db'}",
                                 f"s3://{services['YOLOQ_S3_BUCKET']}/mlflow-{run}", env=base,
                                 log_path=str(logs / "mlflow.log"))
    env = {**base, "YOLOQ_HOME": str(tmp / "home"), "YOLOQ_PORT": str(free_port()),
           "YOLOQ_PROFILE": "cluster",
           "YOLOQ_CHECKPOINT_URI": f"s3://{services['YOLOQ_S3_BUCKET']}/ckpt-{run}",
           "YOLOQ_MLFLOW_URI": f"http://127.0.0.1:{mlflow_port}", "YOLOQ_MIN_RUNTIME_S": "0",
           "YOLOQ_NODE_TIMEOUT_S": "10", "YOLOQ_POLICY_REFRESH_S": "2",
           "YOLOQ_NODE_NAME": first_node, "YOLOQ_DECLARED_GPUS": first_declared}
    pool = Pool(env, tmp / "home", logs)
    saved = dict(os.environ)
    try:
        up = pool.cli("up")
        assert up.returncode == 0, up.stderr[-3000:]
        os.environ.update({k: v for k, v in env.items()
                           if k.startswith(("AWS_", "YOLOQ_CHECKPOINT", "YOLOQ_MLFLOW"))
                           or k in ("YOLOQ_HOME", "YOLOQ_PORT")})
        from prefect.settings import (
            PREFECT_API_AUTH_STRING,
            PREFECT_API_URL,
            temporary_settings,
        )

        with temporary_settings(updates={PREFECT_API_URL: f"http://127.0.0.1:{env['YOLOQ_PORT']}/api",
                                         PREFECT_API_AUTH_STRING: env.get("PREFECT_API_AUTH_STRING")}):
            yield pool
    finally:
        for agent in pool.agents.values():
            _stop(agent)
        pool.cli("down")
        mlflow_server.stop(server)
        os.environ.clear()
        os.environ.update(saved)


def _stop(agent: subprocess.Popen) -> None:
    if agent.poll() is not None:
        return
    try:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- reading the pool through Prefect ------------------------------------------------------

def live_nodes() -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.nodes import read_nodes

    async def read() -> list[Any]:
        async with get_client() as client:
            return await read_nodes(client)

    now = time.time()
    return [n for n in run_coro_as_sync(read()) if n.alive(now)]


def leader() -> dict[str, Any] | None:
    from prefect.variables import Variable

    value = Variable.get("yoloq-scheduler", default=None)
    return value if isinstance(value, dict) else None


def pool_segments() -> list[Any]:
    """Every segment run of the pool (any state)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    found: list[Any] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_flow_runs(work_pool_filter=WorkPoolFilter(
                name=WorkPoolFilterName(any_=["yolo-gpu"])), limit=200, offset=len(found))
            found.extend(page)
            if len(page) < 200:
                return found


def times_started(flow_run_id: Any) -> int:
    """How often a run entered Running, from its state history (a double start shows as 2)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(flow_run_id)
    return sum(1 for s in states if s.type.value == "RUNNING")

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


def remove_s3_prefixes(services: dict[str, str], *prefixes: str) -> None:
    """Delete a finished pool's objects (its checkpoints and MLflow artifacts): a full run
    uploads gigabytes to the one S3 server, and a CI host ran out of disk. Deleted through the
    S3 checkpoint store's own batched delete, which raises on an object S3 refused to delete."""
    from blocks.s3 import S3CheckpointStore

    for prefix in prefixes:
        store = S3CheckpointStore(bucket=services["YOLOQ_S3_BUCKET"], prefix=prefix,
                                  endpoint_url=services["YOLOQ_S3_ENDPOINT_URL"],
                                  access_key_id=services["AWS_ACCESS_KEY_ID"],
                                  secret_access_key=services["AWS_SECRET_ACCESS_KEY"])
        root = f"{prefix}/"
        pages = store.client().get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=root)
        store._delete_keys([item["Key"][len(root):] for page in pages for item in page.get("Contents", [])])


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
def cluster_pool(tmp: Path, first_node: str, first_declared: str,
                 settings: dict[str, str] | None = None) -> Iterator[Pool]:
    """`yoloq up` on the cluster profile with node agent `first_node`; more via start_node.
    `settings` override the pool's environment (every process of it), e.g. a longer
    `YOLOQ_NODE_TIMEOUT_S` for a loaded host."""
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
           "YOLOQ_NODE_NAME": first_node, "YOLOQ_DECLARED_GPUS": first_declared,
           **(settings or {})}
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
        remove_s3_prefixes(services, f"ckpt-{run}", f"mlflow-{run}")


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


LOG_CLUES = ("drained", "lost", "node pass failed", "scheduler lease", "preemption requested",
             "heartbeat not published", "did not stop within its grace", "policy changed")


def pool_diagnostics(pool: Pool, job_ids: list[str], log_lines: int = 40) -> str:
    """What the pool looked like when a wait timed out: the leader, each node's heartbeat age,
    every segment of `job_ids` (state, node, epoch reached, last checkpoint's age, preemption
    labels), the queue board's row for each (its waiting reason) and the agents' log lines
    about drains, lost nodes, failed passes and the lease. Each part is best effort."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    now = time.time()
    out: list[str] = []

    def part(title: str, read: Any) -> None:
        try:
            out.extend([f"-- {title}", *read()])
        except Exception as exc:  # a diagnostic never hides the failure it explains
            out.append(f"-- {title}: not read ({type(exc).__name__}: {exc})")

    def nodes() -> list[str]:
        from prefect.utilities.asyncutils import run_coro_as_sync

        from work_pools.nodes import read_nodes

        async def read() -> list[Any]:
            async with get_client() as client:
                return await read_nodes(client)

        return [f"{n.name}: heartbeat {now - n.heartbeat_at:.1f} s ago, live_runs {list(n.live_runs)}"
                for n in run_coro_as_sync(read())]

    def segments() -> list[str]:
        rows = []
        with get_client(sync_client=True) as client:
            for job in job_ids:
                for seg in segments_of(client, job):
                    labels = seg.labels or {}
                    ckpt = labels.get("yoloq.checkpoint_at")
                    age = f"{now - float(ckpt):.0f} s ago" if ckpt else "none"
                    rows.append(
                        f"{job} {seg.name}: {seg.state.name if seg.state else '?'}, node "
                        f"{labels.get('yoloq.node', '-')}, epoch {labels.get('yoloq.epoch', '-')} "
                        f"of stop_after {(seg.parameters or {}).get('stop_after_epoch')}, last "
                        f"checkpoint {age}, preempt {labels.get('yoloq.preempt', '-')} "
                        f"(by {labels.get('yoloq.preempted_by', '-')})")
        return rows

    def board() -> list[str]:
        from yoloq.views.queueview import _board

        with get_client(sync_client=True) as client:
            rows = _board(client)
        return [f"{r.get('job')} {name}: {r.get('state')} - {r.get('reason')}"
                for name, r in rows.items() if r.get("job") in job_ids] or ["(no rows)"]

    def logs() -> list[str]:
        lines = []
        for path in sorted({*pool.logs.glob("*.log"), *pool.home.rglob("*.log")}):
            text = path.read_text(errors="replace").splitlines()
            hits = [line for line in text if any(c in line for c in LOG_CLUES)]
            lines += [f"{path.name}: {line[-300:]}" for line in hits[-log_lines:]]
        return lines or ["(nothing)"]

    part("leader", lambda: [str(leader())])
    part("nodes", nodes)
    part("segments", segments)
    part("queue board", board)
    part("agent logs", logs)
    return "\n".join(out)


# -- the load scenario: tests/test_cluster_load.py and bench/cluster.py run the same one ----

LOAD_WEIGHTS = {"a": 2.0, "b": 1.0, "c": 1.0, "d": 1.0}
# Jobs per team in proportion to the weights (a 24, b c d 12 each), interleaved as submitted, and
# per team the same tiers in the same proportions and order (a takes each tier twice): the shares
# can then follow the weights while every team has work, and urgent/high jobs arrive while
# lower tiers run, so some preemption is needed.
LOAD_ROUND = ["a", "b", "a", "c", "d"]
LOAD_TIER_MIX = ["low", "normal", "high", "normal", "low", "urgent", "normal", "high", "low",
                 "normal", "high", "normal"]  # per 12 jobs of weight 1: 1 urgent, 3 high, 5 normal, 3 low
TIERS = ("urgent", "high", "normal", "low")
# The smallest real job the spec allows: 8+4 synthetic images at the smallest imgsz (32), one
# epoch in one segment, no export (evaluation cannot be turned off: it always runs once).
LOAD_JOB = {"model": "yolov8n.yaml", "epochs": 1, "segment_epochs": 1, "imgsz": 32, "batch": 4,
            "export": []}
# Differences from the defaults for a loaded host: a node is lost after 30 s without a
# heartbeat (cluster_pool's 10 s, for the drain test, drains healthy nodes on a host this
# busy), and urgent jobs may preempt at once (min_runtime_s=0).
LOAD_SETTINGS = {"YOLOQ_NODE_TIMEOUT_S": "30"}


def load_team_tier(i: int) -> tuple[str, str]:
    """The i-th job submitted: its team (`LOAD_ROUND`, in proportion to the weights) and tier
    (the team's k-th job takes `LOAD_TIER_MIX[k // weight]`)."""
    team = LOAD_ROUND[i % len(LOAD_ROUND)]
    k = sum(1 for j in range(i) if LOAD_ROUND[j % len(LOAD_ROUND)] == team)
    return team, LOAD_TIER_MIX[(k // int(LOAD_WEIGHTS[team])) % len(LOAD_TIER_MIX)]


def load_pool(tmp: Path, nodes: int, slots: int) -> Any:
    """The load scenario's pool: `nodes` node agents of `slots` declared CPU slots each, the
    policy block saved with the team weights and min_runtime_s=0."""
    from stack_helpers import wait_for

    declared = f"{slots}xCPU:8"

    @contextmanager
    def pool_cm() -> Iterator[Pool]:
        with cluster_pool(tmp, "n1", declared, settings=LOAD_SETTINGS) as pool:
            for i in range(2, nodes + 1):
                pool.start_node(f"n{i}", declared)
            wait_for(lambda: len(live_nodes()) == nodes, f"{nodes} live nodes", 300)
            from blocks.policy import SchedulingPolicy

            SchedulingPolicy(team_weights=LOAD_WEIGHTS, min_runtime_s=0).save("yoloq-policy",
                                                                             overwrite=True)
            yield pool

    return pool_cm()


def submit_load(pool: Pool, tmp: Path, data: Path, jobs: int) -> dict[str, tuple[str, str]]:
    """Submit every job in one `yoloq submit` (one burst); job id -> (team, tier)."""
    from stack_helpers import write_spec

    specs = []
    for i in range(jobs):
        team, tier = load_team_tier(i)
        specs.append(write_spec(tmp / f"job{i:03d}.yaml", data, name=f"load{i:03d}", team=team,
                                priority=tier, **LOAD_JOB))
    out = pool.cli("submit", *map(str, specs), "--json", timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    submitted = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return {job["job_id"]: load_team_tier(i) for i, job in enumerate(submitted)}


def job_states(pool: Pool) -> dict[str, str]:
    out = pool.cli("status", "--json")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]  # JSON Lines
    return {j["job_id"]: j["state"] for j in rows} if out.returncode == 0 else {}


def wait_load(pool: Pool, ids: dict[str, Any], timeout_s: float, echo: Any = None) -> None:
    from stack_helpers import FINAL_STATES

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = job_states(pool)
        ended = sum(1 for j in ids if states.get(j) in FINAL_STATES)
        if echo:
            echo(f"{ended}/{len(ids)} jobs ended")
        if ended == len(ids):
            return
        time.sleep(5)
    raise AssertionError(f"not all {len(ids)} jobs ended within {timeout_s:.0f} s")


@dataclass
class LoadFigures:
    """What the load scenario is judged by, read from Prefect's runs and the epoch ledger."""

    states: dict[str, str]
    jobs: dict[str, int]                      # jobs per team
    repeats: dict[str, dict[int, int]]        # jobs with an epoch not trained exactly once
    usage_reported: dict[str, float]          # TU per team, as `yoloq usage` reports it
    usage_expected: dict[str, float]          # TU per team: segments' GPU-s x speed
    contended_s: float                        # first segment start -> first team done
    shares: dict[str, float]                  # realised over the contended interval
    wanted: dict[str, float]                  # the weights' shares
    preemptions_done: int                     # victim segments asked to stop
    preemptions_needed: int                   # preemptor jobs (each needed one slot)
    per_preemptor: dict[str, int]
    preemption_tiers: list[tuple[str, str]]   # (preemptor tier, victim tier)
    delays: dict[str, list[float]]            # per tier: job created -> first segment running
    scheduler: dict[str, Any]                 # the leader's published stats

    def share_error(self, team: str) -> float:
        return abs(self.shares[team] - self.wanted[team]) / self.wanted[team]

    def table(self) -> str:
        lines = [f"jobs: {sum(1 for s in self.states.values() if s == 'Completed')}/"
                 f"{len(self.states)} completed; epochs trained more or less than once: "
                 f"{len(self.repeats)} jobs",
                 f"preemptions: needed {self.preemptions_needed}, done {self.preemptions_done}",
                 f"contended interval: {self.contended_s:.0f} s",
                 "| team | jobs | weight share | realised share | share error | usage TU "
                 "(usage book) | segments' GPU-s x speed TU | usage error |",
                 "|---|---|---|---|---|---|---|---|"]
        for team in sorted(self.wanted):
            got, want = self.usage_reported.get(team, 0.0), self.usage_expected.get(team, 0.0)
            lines.append(f"| {team} | {self.jobs.get(team, 0)} | {self.wanted[team]:.3f} | "
                         f"{self.shares[team]:.3f} | {self.share_error(team):.1%} | {got:.4e} | "
                         f"{want:.4e} | {abs(got - want) / want if want else float('nan'):.4%} |")
        lines += ["| tier | jobs | queue delay p50 | p95 |", "|---|---|---|---|"]
        for tier in TIERS:
            delays = sorted(self.delays.get(tier, []))
            if delays:
                lines.append(f"| {tier} | {len(delays)} | {_pick(delays, 0.5):.1f} s | "
                             f"{_pick(delays, 0.95):.1f} s |")
        s = self.scheduler
        lines.append(f"scheduler (leader {s.get('holder')}, last {s.get('passes')} passes over "
                     f"{s.get('window_s')} s): {s.get('passes_per_s')} decisions/s, decide p50 "
                     f"{s.get('decide_ms_p50')} ms / p95 {s.get('decide_ms_p95')} ms, pass p50 "
                     f"{s.get('pass_ms_p50')} ms / p95 {s.get('pass_ms_p95')} ms")
        return "\n".join(lines)


def _pick(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def load_figures(pool: Pool, ids: dict[str, tuple[str, str]]) -> LoadFigures:
    from prefect.variables import Variable

    from yoloq.domain.gpus import TU_SECONDS
    from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

    states = job_states(pool)
    repeats = {j: c for j in ids if (c := trainings_per_epoch(epoch_trainings(j))) != {1: 1}}
    reported = team_usage()
    segs = [s for s in pool_segments() if (s.parameters or {}).get("job_id") in ids]
    held = [s for s in segs if s.start_time is not None and s.end_time is not None
            and (s.labels or {}).get("yoloq.gpus")]
    expected: dict[str, float] = {}
    for seg in held:
        team, seconds = ids[seg.parameters["job_id"]][0], (seg.end_time - seg.start_time).total_seconds()
        expected[team] = expected.get(team, 0.0) + (
            labels_gpus(seg) * seconds * float(seg.labels["yoloq.gpu_speed"]) / TU_SECONDS)
    used, contended_s = contended_use(segs, ids)
    total = sum(used.values()) or 1.0
    weight_total = sum(LOAD_WEIGHTS.values())
    victims = [s for s in segs if (s.labels or {}).get("yoloq.preempt") == "requested"]
    per_preemptor: dict[str, int] = {}
    for seg in victims:
        by = seg.labels.get("yoloq.preempted_by")
        per_preemptor[by] = per_preemptor.get(by, 0) + 1
    pairs = [(ids[s.labels["yoloq.preempted_by"]][1] if s.labels.get("yoloq.preempted_by") in ids
              else "?", ids[s.parameters["job_id"]][1]) for s in victims]
    first: dict[str, float] = {}
    for seg in segs:
        if seg.start_time is not None:
            job = seg.parameters["job_id"]
            first[job] = min(first.get(job, float("inf")), seg.start_time.timestamp())
    created = _job_created(list(ids))
    delays: dict[str, list[float]] = {}
    for job, (_, tier) in ids.items():
        if job in first and job in created:
            delays.setdefault(tier, []).append(first[job] - created[job])
    stats = Variable.get("yoloq-scheduler-stats", default=None)
    return LoadFigures(
        states={j: states.get(j, "?") for j in ids},
        jobs={t: sum(1 for team, _ in ids.values() if team == t) for t in LOAD_WEIGHTS},
        repeats=repeats, usage_reported=reported,
        usage_expected=expected, contended_s=contended_s,
        shares={t: used[t] / total for t in LOAD_WEIGHTS},
        wanted={t: LOAD_WEIGHTS[t] / weight_total for t in LOAD_WEIGHTS},
        preemptions_done=len(victims), preemptions_needed=len(per_preemptor),
        per_preemptor=per_preemptor, preemption_tiers=pairs, delays=delays,
        scheduler=stats if isinstance(stats, dict) else {})


def contended_use(segs: list[Any], ids: dict[str, tuple[str, str]]) -> tuple[dict[str, float], float]:
    """GPU-seconds per team over the contended interval, and its length: from the first segment
    start until the first team has nothing left to run (its last segment ended)."""
    spans = [(ids[s.parameters["job_id"]][0], s.start_time.timestamp(), s.end_time.timestamp(),
              labels_gpus(s)) for s in segs
             if s.start_time is not None and s.end_time is not None and labels_gpus(s)]
    begin = min(start for _, start, _, _ in spans)
    until = min(max(end for t, _, end, _ in spans if t == team) for team in LOAD_WEIGHTS)
    used = {team: sum(g * max(0.0, min(e, until) - max(s, begin)) for t, s, e, g in spans
                      if t == team) for team in LOAD_WEIGHTS}
    return used, until - begin


def labels_gpus(seg: Any) -> int:
    return len([g for g in str((seg.labels or {}).get("yoloq.gpus") or "").split(",") if g.strip()])


def team_usage(since_s: float = 86400.0) -> dict[str, float]:
    """TU per team over the last day as `yoloq usage` computes it (the scheduler's usage book),
    before its display rounding: `yoloq usage --json` rounds each row to 1e-6 TU, which for a
    tiny job (a few 1e-6 TU) is an error of up to 17% per row."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    from work_pools.usage import UsageBook, usage_table

    async def read() -> list[Any]:
        async with get_client() as client:
            return await UsageBook("yolo-gpu").refresh(client, now)

    now = time.time()
    totals: dict[str, float] = {}
    for row in usage_table(run_coro_as_sync(read()), now, now - since_s):
        totals[row["team"]] = totals.get(row["team"], 0.0) + row["tu"]
    return totals


def _job_created(job_ids: list[str]) -> dict[str, float]:
    """When each job's parent run was created (the submission), by job id (the run's name)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            name=FlowRunFilterName(any_=job_ids)), limit=len(job_ids) + 10)
    return {r.name: r.created.timestamp() for r in runs if r.created is not None}

"""10,000 jobs: the control plane at depth (issue 26), with a stub engine that sleeps.

    .venv/bin/python bench/scale.py [--jobs 10000] [--teams 20] [--nodes 8] [--gpus 8]
                                    [--batch 500] [--epoch-s 90] [--window-s 180]
                                    [--profile local|cluster]

Starts a private embedded stack (`yoloq.ops.stack.private_stack`) and `--nodes` node agents of
`--gpus` declared slots each (`YOLOQ_DECLARED_GPUS=8xA100-80GB:80`: declared, no GPU exists;
the stack's own node agent is the first), creates `--teams` teams and submits `--jobs` jobs
through `POST /v1/jobs/bulk` in requests of `--batch` specs, each request one team's token,
teams in turn. Every segment runs the bench's stub engine (`YOLOQ_BENCH_STUB_SEGMENT_S`,
`flows/stub_segment.py`): it sleeps `--epoch-s` per epoch instead of training and reports its
epoch, checkpoint and MLflow metrics through the normal path. This measures the control
plane (REST API, Prefect server, job runner, scheduler, node agents), not training: the only
place a stub is right. With `--profile cluster` Prefect runs on PostgreSQL
(`profiles/cluster/services.sh start postgres`, a fresh database); where PostgreSQL cannot
be started here the bench says why and stops.

Measured and printed: submissions per second (the bulk requests' wall time); the time until
every job has its segment (the job runner's pace); at that depth, one scheduling decision's
p50/p99 (the leader's own `plan_pass` over the pool read as it reads it: live nodes, open
segment runs, usage; `--decide-samples` decisions over one read, and the read's own time),
beside the leader's published pass and decide times; control-plane memory (RSS of server,
job runner, REST API and the node agents; the nodes' warm launchers and the stub segments are
shown apart); `GET /v1/jobs`, `GET /v1/queue` and `yoloq queue` latency; then, over
`--window-s`, the time from a segment ending on a GPU to the next segment running on that GPU
(from Prefect's run records). Its last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DECLARED = "{n}xA100-80GB:80"
GOALS = {"submit_per_s": (">=", 200.0), "decide_p50_ms": ("<=", 50.0), "decide_p99_ms": ("<=", 200.0),
         "memory_mb": ("<=", 2048.0), "free_to_run_p50_s": ("<=", 2.0)}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def job_spec(data: Path, team: str, index: int) -> dict[str, Any]:
    return {"name": f"scale{index}", "team": team, "priority": "normal", "model": "yolov8n.yaml",
            "data": str(data), "epochs": 1, "imgsz": 64, "batch": 4, "export": [],
            "train_args": {"seed": 0, "deterministic": True, "workers": 0, "plots": False}}


# -- the pool ----------------------------------------------------------------------------------

def start_nodes(stack, count: int, gpus: int, logs: Path) -> list[subprocess.Popen]:
    """`yoloq node` agents 2..count (the stack's own agent is the first), declared slots each."""
    from yoloq.ops.stack import stack_env

    agents = []
    for k in range(2, count + 1):
        env = {**stack_env(stack), "YOLOQ_STACK": "1", "YOLOQ_DECLARED_GPUS": DECLARED.format(n=gpus)}
        env.pop("YOLOQ_NODE_NAME", None)
        log = open(logs / f"node-{k}.log", "ab")
        agents.append(subprocess.Popen([sys.executable, "-m", "yoloq.cli", "node", "--name", f"node-{k}"],
                                       env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return agents


def stop_nodes(agents: list[subprocess.Popen]) -> None:
    for agent in agents:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            if agent.poll() is not None:
                break
            try:
                os.killpg(agent.pid, sig)
                agent.wait(timeout=wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def wait_nodes(count: int, timeout_s: float) -> int:
    from work_pools.nodes import live_pool_gpus

    deadline = time.monotonic() + timeout_s
    while True:
        gpus = live_pool_gpus()
        nodes = {node for node, _ in gpus}
        if len(nodes) >= count or time.monotonic() > deadline:
            return len(nodes)
        time.sleep(2)


def make_teams(stack, count: int) -> dict[str, str]:
    from yoloq.records.teams import TeamStore, store_path

    store = TeamStore(store_path(stack.paths.root))
    return {f"team{k:02d}": store.add(f"team{k:02d}") for k in range(count)}


# -- submitting --------------------------------------------------------------------------------

def submit(rest: Any, tokens: dict[str, str], data: Path, jobs: int, batch: int) -> tuple[list[str], list[float]]:
    """All jobs through the bulk endpoint, one team's batch per request; (ids, request seconds)."""
    ids: list[str] = []
    took: list[float] = []
    teams = list(tokens)
    for number, start in enumerate(range(0, jobs, batch)):
        team = teams[number % len(teams)]
        specs = [job_spec(data, team, i) for i in range(start, min(jobs, start + batch))]
        began = time.perf_counter()
        resp = rest.post("/v1/jobs/bulk", json=specs, headers={"Authorization": f"Bearer {tokens[team]}"})
        took.append(time.perf_counter() - began)
        if resp.status_code != 201:
            raise SystemExit(f"bulk submit {number} refused: {resp.status_code} {resp.text[:500]}")
        ids += resp.json()["job_ids"]
    return ids, took


def counts(client) -> dict[str, int]:
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName, FlowRunFilter,
                                                FlowRunFilterState, FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType

    def count(deployment: str, *states: StateType) -> int:
        return client.count_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=list(states)))),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))

    return {"parents_running": count("yolo-job", StateType.RUNNING),
            "parents_done": count("yolo-job", StateType.COMPLETED),
            "parents_bad": count("yolo-job", StateType.CRASHED, StateType.FAILED),
            "segments_waiting": count("train-segment", StateType.SCHEDULED),
            "segments_running": count("train-segment", StateType.RUNNING, StateType.PENDING),
            "segments_done": count("train-segment", StateType.COMPLETED),
            "segments_bad": count("train-segment", StateType.CRASHED, StateType.FAILED)}


def queued(now: dict[str, int]) -> int:
    """Jobs that have their segment (waiting or running) or are done."""
    return now["segments_waiting"] + now["segments_running"] + now["parents_done"] + now["parents_bad"]


def wait_depth(client, jobs: int, timeout_s: float) -> tuple[dict[str, int], float]:
    """Until every job has its segment (or is done) or `timeout_s`; (counts, seconds)."""
    began = time.monotonic()
    last = 0.0
    while True:
        now = counts(client)
        seen = queued(now)
        elapsed = time.monotonic() - began
        if elapsed - last >= 30 or seen >= jobs:
            print(f"  {elapsed:6.0f} s: {now}", flush=True)
            last = elapsed
        if seen >= jobs or elapsed > timeout_s:
            return now, elapsed
        time.sleep(5)


# -- measuring ---------------------------------------------------------------------------------

def decide_times(samples: int) -> dict[str, Any]:
    """The leader's pass, read-only: the pool read as it reads it, then `plan_pass` (the
    policy's decide over that snapshot) `samples` times."""
    from work_pools.pool_scheduler import PoolGpus, plan_pass, split_open_runs
    from work_pools.scheduling import WorkerPolicy
    from yoloq.api.metrics_reads import open_pool_runs
    from yoloq.api.web_data import segment_intervals
    from yoloq.service.admission import live_nodes
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        began = time.perf_counter()
        nodes = live_nodes(client)
        runs = open_pool_runs(client, scheduled=True)
        read_s = time.perf_counter() - began
        now = time.time()
        began = time.perf_counter()
        intervals = segment_intervals(now)
        usage_s = time.perf_counter() - began
        policy = WorkerPolicy.from_env()
        pool_gpus = PoolGpus.of(nodes)
        occupying, pending = split_open_runs(runs, {n.name for n in nodes}, [], now)
        times = [plan_pass(pool_gpus, occupying, pending, intervals, policy, now).decide_s
                 for _ in range(samples)]
    return {"gpus": len(pool_gpus.gpus), "running": len(occupying), "waiting": len(pending),
            "read_s": read_s, "usage_s": usage_s, "decide_ms": [1000 * t for t in times]}


def leader_stats() -> dict[str, Any]:
    from prefect.variables import Variable

    stats = Variable.get("yoloq-scheduler-stats", default=None) or {}
    return {k: v for k, v in stats.items() if not k.endswith("histogram")}


def memory(stack, agents: list[subprocess.Popen]) -> dict[str, tuple[int, float]]:
    """RSS (MB) and process count by role, for every process of this state folder."""
    import psutil

    from yoloq.ops.stack import SERVICES, _read_pid

    roles: dict[int | None, str] = {_read_pid(stack, name): name for name in SERVICES}
    roles.update({a.pid: "node agent" for a in agents})
    agent_pids = {pid for pid, role in roles.items() if role in ("worker", "node agent")}
    found: dict[str, list[float]] = defaultdict(list)
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("YOLOQ_HOME") != str(stack.paths.root):
                continue
            found[_role(proc, roles, agent_pids)].append(proc.memory_info().rss / 2**20)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return {role: (len(v), sum(v)) for role, v in sorted(found.items())}


def _role(proc, roles: dict[int | None, str], agent_pids: set[int | None]) -> str:
    if proc.pid in roles:
        return "node agent" if roles[proc.pid] == "worker" else roles[proc.pid]
    parents = proc.parents()
    if parents and parents[0].pid in agent_pids:
        return "warm launcher"
    if any(p.pid in agent_pids for p in parents):
        return "segment"
    for parent in parents:
        if parent.pid in roles:
            return f"{roles[parent.pid]} child"
    return "other"


CONTROL_PLANE = ("server", "server child", "runner", "runner child", "api", "api child", "node agent")


def list_latency(rest: Any, token: str, env: dict[str, str], repeat: int = 5) -> dict[str, float | None]:
    """p50 seconds of `GET /v1/jobs`, `GET /v1/queue` and one `yoloq queue` process."""
    out: dict[str, float | None] = {}
    for name, path in (("rest_jobs_s", "/v1/jobs"), ("rest_queue_s", "/v1/queue")):
        took = []
        for _ in range(repeat):
            began = time.perf_counter()
            resp = rest.get(path, headers={"Authorization": f"Bearer {token}"})
            took.append(time.perf_counter() - began)
            if resp.status_code != 200:
                print(f"  {path}: {resp.status_code} {resp.text[:200]}")
        out[name] = statistics.median(took)
    took = []
    for _ in range(max(1, repeat // 2)):
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "yoloq.cli", "queue"], env=env, capture_output=True,
                              text=True, timeout=600)
        took.append(time.perf_counter() - began)
        if done.returncode != 0:
            print(f"  yoloq queue: exit {done.returncode}: {done.stderr[-300:]}")
    out["cli_queue_s"] = statistics.median(took)
    return out


def free_to_run(since: float) -> tuple[list[float], list[float]]:
    """Per GPU, each segment that ended then the next that ran there: (gaps of pairs whose end
    is after `since`, all gaps)."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    from yoloq.api.metrics_reads import paged
    from yoloq.domain.contract import GPUS_LABEL, NODE_LABEL
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        runs = paged(client, None, deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["train-segment"])))
    by_gpu: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for run in runs:
        labels = run.labels or {}
        if run.start_time and labels.get(NODE_LABEL) and labels.get(GPUS_LABEL):
            for gpu in str(labels[GPUS_LABEL]).split(","):
                by_gpu[(labels[NODE_LABEL], gpu)].append(run)
    late, every = [], []
    for seq in by_gpu.values():
        seq.sort(key=lambda r: r.start_time)
        for a, b in zip(seq, seq[1:]):
            if a.end_time is None or b.start_time < a.end_time:
                continue
            gap = (b.start_time - a.end_time).total_seconds()
            every.append(gap)
            if a.end_time.timestamp() >= since:
                late.append(gap)
    return late, every


# -- settings and output -------------------------------------------------------------------------

def changed_settings() -> list[str]:
    from yoloq.settings import variables

    return [f"{v.env}={os.environ[v.env]}" for v in variables() if v.env in os.environ
            and str(os.environ[v.env]) != str(v.default)]


def verdict(key: str, value: float | None) -> str:
    op, goal = GOALS[key]
    if value is None:
        return "not measured"
    met = value >= goal if op == ">=" else value <= goal
    return f"{'met' if met else 'NOT met'} (goal {op} {goal:g})"


def postgres_url(home: Path) -> str:
    """A fresh database on the project's PostgreSQL (started if needed); SystemExit saying why not."""
    from cluster_helpers import SERVICES, fresh_database

    started = subprocess.run(["bash", str(SERVICES), "start", "postgres"], capture_output=True, text=True,
                             timeout=300)
    if started.returncode != 0:
        raise SystemExit("--profile cluster: PostgreSQL could not be started here "
                         f"(profiles/cluster/services.sh start postgres: {started.stderr.strip()[-400:]})")
    printed = subprocess.run(["bash", str(SERVICES), "env"], capture_output=True, text=True, check=True).stdout
    env = dict(line.removeprefix("export ").partition("=")[::2] for line in printed.splitlines() if "=" in line)
    url = env.get("PREFECT_API_DATABASE_CONNECTION_URL", "").strip("'")
    return fresh_database(url, f"prefect_scale_{home.name[-8:].replace('-', '_').lower()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8, help="declared GPUs per node")
    parser.add_argument("--batch", type=int, default=500, help="specs per bulk request")
    parser.add_argument("--epoch-s", type=float, default=90.0, help="the stub segment's sleep per epoch")
    parser.add_argument("--window-s", type=float, default=180.0, help="segments ending and starting at depth")
    parser.add_argument("--settle-s", type=float, default=3600.0, help="at most, for every job to have its segment")
    parser.add_argument("--decide-samples", type=int, default=50)
    parser.add_argument("--profile", choices=("local", "cluster"), default="local")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = Path(tempfile.mkdtemp(prefix="yoloq-scale-"))
    os.environ["YOLOQ_BENCH_STUB_SEGMENT_S"] = f"{args.epoch_s:g}"
    os.environ.setdefault("YOLOQ_NODE_TIMEOUT_S", "120")  # 8 agents and thousands of parents on 2 cores
    database = "SQLite (embedded)"
    if args.profile == "cluster":
        os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] = postgres_url(home)
        database = "PostgreSQL 15 (profiles/cluster/services.sh), a fresh database"

    import httpx

    from yoloq.datasets.synth import synth_dataset
    from yoloq.ops.stack import api_settings, private_stack, stack_env

    print(f"STUB ENGINE IN USE: every segment sleeps {args.epoch_s:g} s per epoch instead of training "
          "(YOLOQ_BENCH_STUB_SEGMENT_S, bench only): this measures the control plane, not training")
    print(f"private stack in {home}; Prefect database: {database}; {args.nodes} node agents x {args.gpus} "
          f"declared GPUs ({DECLARED.format(n=args.gpus)}); {args.jobs} jobs (yolov8n.yaml, 1 epoch, 64 px, "
          f"batch 4, 8+4 synthetic images) from {args.teams} teams via POST /v1/jobs/bulk, {args.batch} per request")
    data = synth_dataset(home / "shapes", train=8, val=4, imgsz=64, seed=0)
    agents: list[subprocess.Popen] = []
    figures: dict[str, Any] = {"jobs": args.jobs, "profile": args.profile, "stub_engine": True}
    began = time.monotonic()
    with private_stack(home, declared_gpus=DECLARED.format(n=args.gpus)) as stack, api_settings(stack):
        print("settings differing from the defaults: " + ", ".join(changed_settings()), flush=True)
        try:
            (home / "logs").mkdir(exist_ok=True)
            agents = start_nodes(stack, args.nodes, args.gpus, home / "logs")
            live = wait_nodes(args.nodes, 300)
            print(f"stack up and {live} live nodes after {time.monotonic() - began:.0f} s", flush=True)
            tokens = make_teams(stack, args.teams)
            idle = memory(stack, agents)
            with httpx.Client(base_url=stack.rest_url, timeout=600) as rest:
                submit_began = time.monotonic()
                ids, took = submit(rest, tokens, data, args.jobs, args.batch)
                submit_s = sum(took)
                figures["submit_per_s"] = round(len(ids) / submit_s, 1)
                print(f"submitted {len(ids)} jobs in {len(took)} requests: {submit_s:.1f} s, "
                      f"{figures['submit_per_s']} jobs/s (request p50 {statistics.median(took):.2f} s, "
                      f"max {max(took):.2f} s)", flush=True)
                from prefect.client.orchestration import get_client

                with get_client(sync_client=True) as client:
                    state, settle_s = wait_depth(client, args.jobs, args.settle_s)
                figures["all_queued_s"] = round(time.monotonic() - submit_began, 1)
                figures["waiting"] = state["segments_waiting"]
                reached = queued(state)
                figures["runner_jobs_per_s"] = round(reached / max(1.0, figures["all_queued_s"]), 2)
                print(f"{'every job' if reached >= args.jobs else f'{reached} of {args.jobs} jobs'} had its "
                      f"segment {figures['all_queued_s']} s after the submit began "
                      f"({figures['runner_jobs_per_s']} jobs/s through the job runner)"
                      + ("" if reached >= args.jobs else f"; --settle-s {args.settle_s:g} ran out"))
                depth_at = time.time()
                plane = memory(stack, agents)
                figures["memory_mb"] = round(sum(mb for r, (_, mb) in plane.items() if r in CONTROL_PLANE))
                decided = decide_times(args.decide_samples)
                figures["decide_p50_ms"] = round(pct(decided["decide_ms"], 0.5), 2)
                figures["decide_p99_ms"] = round(pct(decided["decide_ms"], 0.99), 2)
                figures["pool_read_s"] = round(decided["read_s"], 2)
                lists = list_latency(rest, next(iter(tokens.values())), stack_env(stack))
                figures.update({k: round(v, 3) for k, v in lists.items() if v is not None})
                time.sleep(args.window_s)
                figures["leader"] = leader_stats()
                late, every = free_to_run(depth_at)
                figures["free_to_run_p50_s"] = round(pct(late or every, 0.5), 2) if (late or every) else None
                figures["free_to_run_p95_s"] = round(pct(late or every, 0.95), 2) if (late or every) else None
                figures["free_to_run_pairs"] = len(late or every)
                with get_client(sync_client=True) as client:
                    figures["end_counts"] = counts(client)
        finally:
            stop_nodes(agents)
    print()
    print("| role | processes | RSS at 0 jobs (MB) | RSS at depth (MB) |\n|---|---:|---:|---:|")
    for role in sorted(set(idle) | set(plane)):
        print(f"| {role}{' (control plane)' if role in CONTROL_PLANE else ''} | {plane.get(role, (0, 0))[0]} "
              f"| {idle.get(role, (0, 0.0))[1]:,.0f} | {plane.get(role, (0, 0.0))[1]:,.0f} |")
    print(f"\none decision at depth: {decided['waiting']} waiting, {decided['running']} running, "
          f"{decided['gpus']} GPUs: p50 {figures['decide_p50_ms']} ms, p99 {figures['decide_p99_ms']} ms "
          f"over {args.decide_samples}; the pool read before it {decided['read_s']:.2f} s, usage {decided['usage_s']:.2f} s")
    print(f"leader's own passes: {figures['leader']}")
    print(f"GPU freed -> next segment running: p50 {figures['free_to_run_p50_s']} s, p95 "
          f"{figures['free_to_run_p95_s']} s over {figures['free_to_run_pairs']} "
          f"{'pairs at depth' if late else 'pairs (none at depth; all pairs)'}")
    print(f"list latency at depth: GET /v1/jobs {figures.get('rest_jobs_s')} s, GET /v1/queue "
          f"{figures.get('rest_queue_s')} s, `yoloq queue` {figures.get('cli_queue_s')} s")
    for key in GOALS:
        print(f"{key}: {figures.get(key)}: {verdict(key, figures.get(key))}")
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

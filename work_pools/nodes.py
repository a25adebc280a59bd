"""Node records: each node agent publishes its GPU inventory and a heartbeat in Prefect.

One Prefect Variable per node, named `yoloq-node-<name>`, holds JSON:
`{"name", "pool", "host", "pid", "heartbeat_at", "gpus": [...], "live_runs": [...]}`.
Node names are unique on one Prefect server; a pool's scheduler reads only its pool's nodes.
`live_runs` lists the segment flow runs whose processes are still alive on the node,
so the scheduler keeps their GPUs busy until the process has really exited (a run
reaches a final state a moment before its process ends). A node whose heartbeat is
older than `YOLOQ_NODE_TIMEOUT_S` (default 30 s) is lost: the scheduler drains it.

A record published before the scheduler's last change on that node (an admission or a
preemption) does not show that change yet (`report_is_fresh`): the scheduler waits for a
newer one before it decides about that node's GPUs again.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from work_pools.inventory import GpuInfo
from yoloq.base.errors import UserError
from yoloq.domain.contract import NODE_VARIABLE_TAG
from yoloq.settings import settings

NODE_VARIABLE_PREFIX = "yoloq-node-"
DEFAULT_NODE_TIMEOUT_S = 30.0
_NAME_OK = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class NodeRecord:
    name: str
    gpus: tuple[GpuInfo, ...]
    heartbeat_at: float
    live_runs: tuple[str, ...] = ()
    host: str = ""
    pid: int = 0
    pool: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def alive(self, now: float, timeout_s: float | None = None) -> bool:
        return now - self.heartbeat_at <= (timeout_s if timeout_s is not None else node_timeout_s())


def node_timeout_s() -> float:
    return settings().node_timeout_s


def heartbeat_every_s() -> float:
    """How often a node publishes its record: a sixth of the node timeout, 1 to 5 s, so
    a few beats may be lost or late before the node counts as lost."""
    return min(5.0, max(1.0, node_timeout_s() / 6))


def report_is_fresh(record: NodeRecord, changed_at: float | None, now: float) -> bool:
    """Was `record` published after the scheduler's last change on its node (`changed_at`)?
    After two heartbeat periods without such a record the node's clock may disagree with
    the leader's: the record is used anyway (a bounded wait, never a stuck node)."""
    if changed_at is None or record.heartbeat_at >= changed_at:
        return True
    return now - changed_at >= 2 * heartbeat_every_s()


def validate_node_name(name: str) -> str:
    if not _NAME_OK.match(name):
        raise UserError("--name", f"node name {name!r} is not allowed",
                        "use lowercase letters, digits, '-' and '_' (at most 63), e.g. gpu-a")
    return name


def default_node_name(worker_name: str | None = None) -> str:
    """`YOLOQ_NODE_NAME`, else the worker's own `--name` (`prefect worker start --name gpu-b`),
    else this host's name, made safe for a Prefect Variable."""
    explicit = settings().node_name
    if explicit:
        return validate_node_name(explicit)
    return _safe_name(worker_name or socket.gethostname())


def _safe_name(text: str) -> str:
    safe = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")
    return (safe or "node")[:63]


def variable_name(node: str) -> str:
    return f"{NODE_VARIABLE_PREFIX}{node}"


def to_value(record: NodeRecord) -> dict[str, Any]:
    return {"name": record.name, "pool": record.pool, "host": record.host, "pid": record.pid,
            "heartbeat_at": record.heartbeat_at, "live_runs": list(record.live_runs),
            "gpus": [_gpu_value(g) for g in record.gpus], **record.extra}


def from_value(value: Any) -> NodeRecord | None:
    """A record from a Variable's value; None when it is not one (ignored, never guessed)."""
    if not isinstance(value, dict) or "name" not in value:
        return None
    try:
        gpus = tuple(GpuInfo(index=int(g["index"]), uuid=str(g.get("uuid", "")), name=str(g["name"]),
                             mem_total_gb=float(g["mem_total_gb"]),
                             mem_free_gb=float(g.get("mem_free_gb", g["mem_total_gb"])),
                             kind=str(g.get("kind", "declared")))
                     for g in value.get("gpus") or [])
        return NodeRecord(name=str(value["name"]), gpus=gpus,
                          heartbeat_at=float(value["heartbeat_at"]),
                          live_runs=tuple(str(r) for r in value.get("live_runs") or []),
                          host=str(value.get("host", "")), pid=int(value.get("pid") or 0),
                          pool=str(value.get("pool") or ""))
    except (KeyError, TypeError, ValueError):
        return None


def _gpu_value(gpu: GpuInfo) -> dict[str, Any]:
    return {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "kind": gpu.kind,
            "mem_total_gb": round(gpu.mem_total_gb, 3), "mem_free_gb": round(gpu.mem_free_gb, 3)}


def make_record(name: str, gpus: list[GpuInfo], live_runs: list[str],
                now: float | None = None, pool: str = "") -> NodeRecord:
    return NodeRecord(name=name, gpus=tuple(gpus), heartbeat_at=now or time.time(),
                      live_runs=tuple(live_runs), host=socket.gethostname(), pid=os.getpid(),
                      pool=pool)


async def publish(client: Any, record: NodeRecord) -> None:
    """Create or update the node's Variable (the heartbeat)."""
    from work_pools.prefect_vars import upsert_variable

    await upsert_variable(client, variable_name(record.name), to_value(record), tags=[NODE_VARIABLE_TAG])


async def remove(client: Any, node: str) -> None:
    """A node leaving on purpose deletes its record (a lost node's record just goes stale)."""
    try:
        await client.delete_variable_by_name(variable_name(node))
    except Exception:
        pass


async def read_nodes(client: Any, pool: str | None = None) -> list[NodeRecord]:
    """Every node record of the stack (of `pool` when given; a record that names no pool
    counts for every pool), live or stale, sorted by name."""
    from work_pools.prefect_vars import read_variables_named

    return _records(await read_variables_named(client, NODE_VARIABLE_PREFIX), pool)


def read_nodes_sync(client: Any, pool: str | None = None) -> list[NodeRecord]:
    """`read_nodes` through a sync client."""
    from work_pools.prefect_vars import read_variables_named_sync

    return _records(read_variables_named_sync(client, NODE_VARIABLE_PREFIX), pool)


def _records(variables: list[Any], pool: str | None) -> list[NodeRecord]:
    records = (from_value(v.value) for v in variables)
    return sorted((r for r in records if r is not None and (not pool or r.pool in ("", pool))),
                  key=lambda r: r.name)


def live_pool_gpus(now: float | None = None) -> list[tuple[str, GpuInfo]]:
    """(node, GPU) for every live node, through the current Prefect API settings."""
    from prefect.client.orchestration import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def _read() -> list[NodeRecord]:
        async with get_client() as client:
            return await read_nodes(client)

    moment = now or time.time()
    return [(node.name, gpu) for node in run_coro_as_sync(_read()) or []
            if node.alive(moment) for gpu in node.gpus]

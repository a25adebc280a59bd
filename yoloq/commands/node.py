"""`yoloq node --name NAME`: run this host's node agent (the `yolo-gpu` worker) in the foreground.

It joins the stack named by `PREFECT_API_URL` (else this state folder's embedded
stack), publishes its GPU inventory and a heartbeat, and runs what the pool's
scheduler assigns to it. Stores come from the usual settings or blocks. Hosts
without NVML declare slots with `YOLOQ_DECLARED_GPUS` (e.g. `2xA100-80GB:80`).
"""

from __future__ import annotations

import argparse
import os
import sys

from yoloq.base.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="node name: lowercase letters, digits, '-', '_' "
                                       "(default: $YOLOQ_NODE_NAME or the host name)")
    parser.add_argument("--pool", default=None, help="work pool (default yolo-gpu)")
    parser.add_argument("--json", action="store_true", help="print the join line as one JSON object")


def run(args: argparse.Namespace) -> int:
    from work_pools.nodes import default_node_name, validate_node_name
    from yoloq.base.names import GPU_POOL

    name = validate_node_name(args.name) if args.name else default_node_name()
    env = _node_env()
    if getattr(args, "json", False):
        import json

        print(json.dumps({"node": name, "pool": args.pool or GPU_POOL, "api_url": env["PREFECT_API_URL"]}),
              flush=True)
    else:
        print(f"node {name} joining pool {args.pool or GPU_POOL} at {env['PREFECT_API_URL']}",
              flush=True)
    command = [sys.executable, "-m", "work_pools.run_worker", "--name", name,
               "--pool", args.pool or GPU_POOL]
    os.execve(sys.executable, command, env)
    return 0  # not reached


def _node_env() -> dict[str, str]:
    """The embedded stack's environment, except that an explicit PREFECT_API_URL wins."""
    from yoloq.ops.stack import api_answers, current_stack, stack_env

    explicit = os.environ.get("PREFECT_API_URL")
    env = stack_env(current_stack())
    if explicit:
        env["PREFECT_API_URL"] = explicit
    if not api_answers(env["PREFECT_API_URL"], timeout_s=5):
        raise UserError("PREFECT_API_URL", f"no Prefect server answers on {env['PREFECT_API_URL']}",
                        "start the stack (`yoloq up`) or point PREFECT_API_URL at the server")
    from yoloq.base.prefect_auth import check_access

    check_access(env["PREFECT_API_URL"])  # missing or wrong PREFECT_API_AUTH_STRING: one line, now
    return env

"""`yoloq up` and `yoloq down`."""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import print_json
from yoloq.base.errors import UserError


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="Prefect server port (default 4210 or $YOLOQ_PORT)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_down_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drain-timeout", type=float, metavar="SECONDS", default=None,
                        help="how long running segments may take to reach their next epoch "
                             "boundary before they are stopped hard (default: one epoch plus "
                             "the checkpoint, as each segment measured them; 0: stop at once)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_up(args: argparse.Namespace) -> int:
    import os

    from yoloq.base.prefect_auth import prepare_server_host
    from yoloq.ops.stack import up

    prepare_server_host(os.environ)  # the cluster profile's Prefect API requires credentials

    if args.port is not None and not 1 <= args.port <= 65535:
        raise UserError("--port", f"{args.port} is not a TCP port", "use 1024-65535, e.g. --port 4210")
    check_policy_overrides()  # a YOLOQ_* policy value out of range: refused before anything starts
    if args.json:
        stack = up(port=args.port, echo=lambda line: print(line, file=sys.stderr))
        print_json({"ui_url": stack.ui_url, "api_url": stack.api_url, "rest_url": stack.rest_url,
                    "state": str(stack.paths.root), "policy": policy_in_force()})
        return 0
    stack = up(port=args.port)
    print(f"yoloq is up. Prefect UI: {stack.ui_url}   yoloq API: {stack.rest_url} (docs {stack.rest_url}/docs)"
          f"   state: {stack.paths.root}")
    document = policy_in_force()
    if document is not None:
        from yoloq.commands.policy import render

        print("scheduling policy in force (`yoloq policy show`; env beats block beats default):")
        print(render(document))
    if running_with_other_settings():
        print("note: the stack was already running with other YOLOQ_* settings than this shell's; its "
              "processes keep theirs (the table shows this shell's) until `yoloq down && yoloq up`",
              file=sys.stderr)
    return 0


def running_with_other_settings() -> bool:
    """True when the stack's API started under other YOLOQ_*/AWS_* settings than this process
    (it was already running): its processes resolve the policy under theirs."""
    import json
    import os

    from yoloq.client.local_stack import operator_file, settings_digest

    try:
        saved = json.loads(operator_file().read_text())
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and saved.get("settings") != settings_digest(os.environ)


def check_policy_overrides() -> None:
    from blocks.policy import check_env_overrides

    check_env_overrides()


def policy_in_force() -> dict | None:
    """The policy the stack's processes resolve (they inherit this environment), or None with a
    warning line when it cannot be read (the stack is up either way)."""
    from yoloq.commands.policy import local_document

    try:
        return local_document()
    except Exception as exc:  # a block that does not load: the scheduler logs the same problem
        print(f"warning: the scheduling policy could not be read ({type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:200]})", file=sys.stderr)
        return None


def run_down(args: argparse.Namespace) -> int:
    import math

    from yoloq.ops.stack import down

    timeout = args.drain_timeout
    if timeout is not None and (not math.isfinite(timeout) or timeout < 0):
        raise UserError("--drain-timeout", f"{timeout:g} is not a number of seconds >= 0",
                        "use e.g. --drain-timeout 120, or 0 to stop segments at once")
    if args.json:
        stopped = down(echo=lambda line: print(line, file=sys.stderr), drain_timeout_s=timeout)
        print_json({"stopped_processes": stopped})
        return 0
    down(drain_timeout_s=timeout)
    return 0

"""Shared by the commands that talk to the running stack."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from yoloq.errors import UserError


@contextmanager
def stack_client() -> Iterator[Any]:
    """A sync Prefect client for the stack of this state folder; a clear error if it is down.

    A command that only reads never creates the state folder: without one, no stack runs here.
    """
    from yoloq.paths import state_paths
    from yoloq.stack import current_stack, healthy, use_stack

    paths = state_paths()
    if not paths.root.is_dir():
        raise UserError("stack", f"no yoloq state folder at {paths.root}, so no stack runs for it",
                        "start one with `yoloq up`, or point --home/YOLOQ_HOME at an existing state folder")
    stack = current_stack()
    if not healthy(stack):
        raise UserError("stack", f"no yoloq server answers on {stack.api_url}",
                        "start it with `yoloq up` (same --home/YOLOQ_HOME)")
    use_stack(stack)
    from prefect.client.orchestration import get_client

    from yoloq.stack import api_settings

    with api_settings(stack), get_client(sync_client=True) as client:
        yield client


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)

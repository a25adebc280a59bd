"""Shared by the commands that talk to the running stack: the local Prefect client (honouring an
explicit PREFECT_API_URL), the remote yoloq API when a server is configured, and `--watch`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from yoloq.base.errors import UserError
from yoloq.service.connection import explicit_api_url, stack_client

__all__ = ["Backend", "backend", "explicit_api_url", "local_api", "print_json", "stack_client", "table", "watch"]


def local_api() -> Any | None:
    """This host's stack API as its local operator (`yoloq.client.local_stack`), or None: no state
    folder, no API answering, or the user's own PREFECT_API_URL naming another server."""
    from yoloq.base.paths import state_paths
    from yoloq.client.local_stack import USER_HEADER, local_server
    from yoloq.client.remote import Remote
    from yoloq.ops.stack import chosen_port
    from yoloq.records.events import actor

    paths = state_paths()
    if explicit_api_url() is not None or not paths.root.is_dir():
        return None
    server = local_server(chosen_port(paths))
    return Remote(server, headers={USER_HEADER: actor()}) if server is not None else None


@dataclass
class Backend:
    """Where a user command reads and writes: the remote yoloq API, else the local Prefect client."""

    remote: Any = None
    client: Any = None


@contextmanager
def backend() -> Iterator[Backend]:
    """The configured yoloq server (`yoloq login`, YOLOQ_SERVER), else this host's stack."""
    from yoloq.client.remote import remote

    server = remote()
    if server is not None:
        with server:
            yield Backend(remote=server)
        return
    with stack_client() as client:
        yield Backend(client=client)


def add_watch_arguments(parser: Any) -> None:
    parser.add_argument("--watch", action="store_true", help="redraw live until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between redraws (default 2)")
    parser.add_argument("--count", type=int, default=None, help="with --watch: stop after N redraws")


def watch(render: Callable[[], str], interval_s: float, count: int | None) -> int:
    """Redraw `render()` every `interval_s` (the screen is cleared on a terminal); Ctrl-C exits 0."""
    if interval_s <= 0 or (count is not None and count < 1):
        raise UserError("--interval/--count", "must be positive", "e.g. --interval 2 --count 10")
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    drawn = 0
    try:
        while count is None or drawn < count:
            body = render()
            stamp = time.strftime("%H:%M:%S")
            sys.stdout.write(f"{clear}every {interval_s:g}s, {stamp} (Ctrl-C to stop)\n{body}\n")
            sys.stdout.flush()
            drawn += 1
            if count is None or drawn < count:
                time.sleep(interval_s)
    except KeyboardInterrupt:
        sys.stdout.write("\n")
    return 0


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

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

__all__ = ["Backend", "add_table_arguments", "backend", "explicit_api_url", "flush_events", "local_api", "print_json",
           "print_json_lines", "stack_client", "table", "watch"]

def flush_events() -> None:
    """Wait until the audit events this process emitted have been sent; `yoloq.cli.main` calls it
    as a command ends (not the long-lived API process, where other requests keep emitting). Left
    queued, Prefect's
    exit-time drain sends them but first logs `Still processing items: 1 items remaining...` on
    stderr (`prefect._internal.concurrency.services`: a drain that finds items still queued);
    sent here, the queue is empty at exit and the command's stderr stays clean. A send that fails
    is still logged by Prefect's events worker (nothing is swallowed)."""
    worker = sys.modules.get("prefect.events.worker")
    if worker is None:  # nothing emitted an event in this process
        return
    for service in list(getattr(worker.EventsWorker, "_instances", {}).values()):
        if isinstance(service, worker.EventsWorker):
            service.wait_until_empty()


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


def change_job(job: str, route: str, body: dict[str, Any], local: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """One change to a job, through the server (`POST /jobs/JOB/ROUTE` with `body`) or, on this
    host, `local(client, job_run)` from the service layer; the change's dict either way."""
    from yoloq.service import jobs

    with backend() as where:
        if where.remote is not None:
            return where.remote.post(f"/jobs/{job}/{route}", body)
        return local(where.client, jobs.find(where.client, job)).to_dict()


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


def add_table_arguments(parser: Any, json_help: str = "one JSON object per line (JSON Lines)") -> None:
    """`--json` and `--wide`, for every command that prints a table."""
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--wide", action="store_true", help="show every column whole, whatever the terminal's width")


def print_json(obj: Any) -> None:
    """One JSON value on one line (a script reads it with one `json.loads` per line)."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")


def print_json_lines(rows: list[Any]) -> None:
    """Several rows: one JSON object per line (JSON Lines); nothing at all for no rows."""
    for row in rows:
        print_json(row)


def table(rows: list[dict[str, Any]], columns: list[str], wide: bool = False) -> str:
    """A quick table of `columns` (keys), all of equal priority: see `yoloq.views.table` for one
    with priorities and ids that are never cut."""
    from yoloq.views.table import Column, render

    return render(rows, [Column(key) for key in columns], wide=wide)

"""`yoloq queue [--json] [--watch]`: running and waiting segments, with position and waiting reason
(this host's stack, or the configured yoloq server)."""

from __future__ import annotations

import argparse
from typing import Any

from yoloq.commands._client import (
    add_watch_arguments,
    backend,
    print_json,
    table,
    watch,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")
    add_watch_arguments(parser)


def run(args: argparse.Namespace) -> int:
    with backend() as where:
        if args.watch:
            return watch(lambda: render(queue_rows(where)), args.interval, args.count)
        rows = queue_rows(where)
    if args.json:
        print_json(rows)
    else:
        print(render(rows))
    return 0


def queue_rows(where: Any) -> list[dict[str, Any]]:
    if where.remote is not None:
        return where.remote.get("/queue")
    from yoloq.views.queueview import queue_rows as local_rows

    return local_rows(where.client)


def render(rows: list[dict[str, Any]]) -> str:
    return table(rows, ["position", "job", "team", "tier", "state", "epoch", "eta", "reason"])

"""`yoloq queue [--json] [--watch]`: running and waiting segments, with position and waiting reason
(this host's stack, or the configured yoloq server)."""

from __future__ import annotations

import argparse
from typing import Any

from yoloq.commands._client import (
    add_table_arguments,
    add_watch_arguments,
    backend,
    print_json_lines,
    watch,
)
from yoloq.views.table import Column, render as render_table

COLUMNS = (
    Column("position", "#", priority=2, right=True),
    Column("job", ident=True, priority=0),
    Column("team", priority=4),
    Column("tier", priority=3),
    Column("state", priority=1),
    Column("epoch", priority=2),
    Column("eta", "ETA", priority=5, min_width=8),
    Column("reason", priority=6, min_width=12, wrap=True),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser, "one JSON object per queued or running segment, one per line")
    add_watch_arguments(parser)


def run(args: argparse.Namespace) -> int:
    with backend() as where:
        if args.watch:
            return watch(lambda: render(queue_rows(where), args.wide), args.interval, args.count)
        rows = queue_rows(where)
    if args.json:
        print_json_lines(rows)
    else:
        print(render(rows, args.wide))
    return 0


def queue_rows(where: Any) -> list[dict[str, Any]]:
    if where.remote is not None:
        return where.remote.get("/queue")
    from yoloq.views.queueview import queue_rows as local_rows

    return local_rows(where.client)


def render(rows: list[dict[str, Any]], wide: bool = False) -> str:
    return render_table(rows, COLUMNS, wide=wide, empty="(no queued or running jobs)")

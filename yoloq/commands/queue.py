"""`yoloq queue [--json]`: running and waiting segments, with position and waiting reason."""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, stack_client, table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from yoloq.queueview import queue_rows

    with stack_client() as client:
        rows = queue_rows(client)
    if args.json:
        print_json(rows)
    else:
        print(table(rows, ["position", "job", "team", "tier", "state", "epoch", "eta", "reason"]))
    return 0

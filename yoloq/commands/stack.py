"""`yoloq up` and `yoloq down`."""

from __future__ import annotations

import argparse


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="Prefect server port (default 4210 or $YOLOQ_PORT)")


def add_down_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_up(args: argparse.Namespace) -> int:
    from yoloq.stack import up

    stack = up(port=args.port)
    print(f"yoloq is up. Prefect UI: {stack.ui_url}   state: {stack.paths.root}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from yoloq.stack import down

    down()
    return 0

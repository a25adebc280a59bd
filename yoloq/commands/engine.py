"""`yoloq engine install NAME` / `yoloq engine list`: engines with their own environment (YOLO-NAS)."""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from yoloq.engine.environments import ENVIRONMENTS

    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    install = tools.add_parser("install", help="create an engine's virtual environment (needs the package "
                                               "registry once; training stays offline)")
    install.add_argument("name", choices=sorted(ENVIRONMENTS))
    install.add_argument("--force", action="store_true", help="reinstall even when installed")
    install.add_argument("--json", action="store_true", help="print one JSON object (the steps go to stderr)")
    listing = tools.add_parser("list", help="engines, where they live and whether they are installed")
    listing.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.engine import environments

    if args.tool == "install":
        out = sys.stderr if args.json else sys.stdout
        python = environments.install(args.name, echo=lambda line: print(line, file=out, flush=True),
                                      force=args.force)
        if args.json:
            print_json({"engine": args.name, "installed": True, "python": str(python)})
        return 0
    rows = {env.name: {"installed": env.installed(), "path": str(env.root), "why": env.why}
            for env in environments.ENVIRONMENTS.values()}
    if args.json:
        print_json(rows)
        return 0
    for name, row in rows.items():
        state = "installed" if row["installed"] else f"not installed (yoloq engine install {name})"
        print(f"{name:10} {state:48} {row['path']}")
    return 0

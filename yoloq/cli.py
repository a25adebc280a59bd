"""The `yoloq` command line.

Each subcommand lives in `yoloq.commands.<name>` with `add_arguments(parser)` and
`run(args) -> int`; modules are imported only when their command runs, so
fast commands (`analyse`) never pay for importing Prefect or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from yoloq.errors import UserError

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("stack", "start the embedded stack (Prefect server, deployments, runner, GPU worker)"),
    "down": ("stack", "stop everything `yoloq up` started"),
    "analyse": ("analyse", "validate a job spec and its dataset; fingerprint, estimate, classify"),
    "submit": ("submit", "analyse a job spec and queue it"),
    "status": ("status", "show one job, or all jobs"),
    "queue": ("queue", "show running and waiting jobs with positions and reasons"),
    "cancel": ("cancel", "cancel a job"),
    "retier": ("retier", "move a queued or running job to another tier"),
    "quota": ("quota", "set or clear a team's Training Unit budget"),
    "history": ("history", "show a job's timeline"),
    "audit": ("audit", "list audit events"),
    "dataset": ("dataset", "dataset tools (synth, updated)"),
    "alerts": ("alerts", "notify a webhook or notification block when a team exceeds its quota"),
    "simulate": ("simulate", "replay a job trace through the scheduling policy"),
    "demo": ("demo", "run the demo: three teams, three tiers, live progress"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All commands are listed; only `only` (the one being run) imports its module."""
    parser = argparse.ArgumentParser(
        prog="yoloq", description="A fair, preemptive training queue for YOLO models on shared "
                                  "GPUs. Quick start: `yoloq demo`; see the README.")
    parser.add_argument("--home", help="state folder (default: $YOLOQ_HOME or ./.yoloq)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            mod = _module(module)
            adder = getattr(mod, f"add_{name}_arguments", None) or getattr(mod, "add_arguments")
            adder(command)
    return parser


def _chosen(argv: list[str]) -> str | None:
    return next((a for a in argv if a in COMMANDS), None)


def _module(name: str):
    return importlib.import_module(f"yoloq.commands.{name}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(only=_chosen(argv) or "").parse_args(argv)
    if args.home:
        import os

        os.environ["YOLOQ_HOME"] = args.home
    module = _module(COMMANDS[args.command][0])
    runner = getattr(module, f"run_{args.command}", None) or getattr(module, "run")
    try:
        return int(runner(args) or 0)
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The `yoloq` command line.

Each subcommand lives in `yoloq.commands.<name>` with `add_arguments(parser)` and
`run(args) -> int`; modules are imported only when their command runs, so
fast commands (`analyse`) never pay for importing Prefect or torch. Adding a
command is one line in COMMANDS.

Every error is one line on stderr with exit code 2 (usage errors included);
`--home DIR` is accepted anywhere on the command line; output cut short by a
closed pipe (`yoloq ... | head -1`) ends quietly with 141, like other Unix tools.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from yoloq import __version__
from yoloq.base.errors import UserError, one_line
from yoloq.settings import settings

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("stack", "start the embedded stack (Prefect server, deployments, runner, GPU worker)"),
    "down": ("stack", "stop everything `yoloq up` started"),
    "analyse": ("analyse", "validate a job spec and its dataset; fingerprint, estimate, classify"),
    "submit": ("submit", "analyse job specs or sweeps and queue them (key=value overrides)"),
    "status": ("status", "show one job, or all jobs"),
    "queue": ("queue", "show running and waiting jobs with positions and reasons"),
    "cancel": ("cancel", "cancel a job"),
    "retier": ("retier", "move a queued or running job to another tier"),
    "extend": ("extend", "raise a job's total epochs; it trains on from its newest checkpoint"),
    "quota": ("quota", "set or clear a team's Training Unit budget"),
    "history": ("history", "show a job's timeline"),
    "audit": ("audit", "list audit events"),
    "dataset": ("dataset", "dataset tools (synth, updated)"),
    "engine": ("engine", "install or list engines that need their own environment (YOLO-NAS)"),
    "alerts": ("alerts", "notify a webhook or notification block when a team exceeds its quota"),
    "node": ("node", "run this host's node agent: join the pool and run what the scheduler assigns"),
    "usage": ("usage", "Training Units per team and job, from the segment runs' records"),
    "team": ("team", "add, list, rotate or remove the teams that may use the yoloq API (tokens)"),
    "simulate": ("simulate", "replay a job trace through the scheduling policy"),
    "login": ("login", "use a yoloq server from this machine: check and save its URL and your team token"),
    "logout": ("login", "forget the saved yoloq server and token (commands use this host's stack)"),
    "logs": ("logs", "show a job's training log (--follow for new lines until it ends)"),
    "demo": ("demo", "run the demo: three teams, three tiers, live progress"),
    "policy": ("policy", "show the scheduling policy in force and where each value comes from, or set keys"),
}
HOME_FLAG = "--home"
SIGPIPE_EXIT = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`error: ...`) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (fix: see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All commands are listed; only `only` (the one being run) imports its module."""
    parser = OneLineParser(
        prog="yoloq", description="A fair, preemptive training queue for YOLO models on shared "
                                  "GPUs. Quick start: `yoloq demo`; see the README.")
    parser.add_argument(HOME_FLAG, help="state folder (default: $YOLOQ_HOME or ./.yoloq); "
                                        "accepted anywhere on the command line")
    parser.add_argument("--version", action="version", version=f"yoloq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            mod = _module(module)
            adder = getattr(mod, f"add_{name}_arguments", None) or mod.add_arguments
            adder(command)
    return parser


def split_home(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take every `--home DIR` / `--home=DIR` out of argv (anywhere before a bare `--`)."""
    home, rest, index = None, [], 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            rest += argv[index:]
            break
        if arg == HOME_FLAG:
            if index + 1 >= len(argv):
                raise UserError(HOME_FLAG, "needs a folder", "write --home DIR")
            home, index = argv[index + 1], index + 2
            continue
        if arg.startswith(HOME_FLAG + "="):
            home = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        index += 1
    if home is not None and not home.strip():
        raise UserError(HOME_FLAG, "is empty", "write --home DIR")
    return home, rest


def chosen_command(argv: list[str]) -> str | None:
    """The command: the first argument that is not an option (`--home` already taken out)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def _module(name: str):
    return importlib.import_module(f"yoloq.commands.{name}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        home, argv = split_home(argv)
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    if home is not None:
        os.environ["YOLOQ_HOME"] = home
    try:
        settings()  # a bad YOLOQ_* value: one line now, before any module reads it
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    args = build_parser(only=chosen_command(argv) or "").parse_args(argv)
    module = _module(COMMANDS[args.command][0])
    runner = getattr(module, f"run_{args.command}", None) or module.run
    try:
        code = int(runner(args) or 0)
        sys.stdout.flush()
        return code
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT
    except OSError as exc:  # a file or socket the command needed: one line (YOLOQ_DEBUG=1 re-raises)
        if _debug():
            raise
        where = exc.filename if exc.filename is not None else type(exc).__name__
        print(f"error: {one_line(str(where))}: {one_line(exc.strerror or str(exc))} "
              "(fix: check the path or service named; YOLOQ_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _flush_events()


def _flush_events() -> None:
    """The command's audit events sent before exit (else Prefect prints `Still processing items`)."""
    if "prefect.events.worker" in sys.modules:
        from yoloq.commands._client import flush_events

        flush_events()


def _debug() -> bool:
    try:
        return settings().debug
    except UserError:
        return False


def _silence_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the exit flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())

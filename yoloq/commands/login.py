"""`yoloq login URL [--token T]` and `yoloq logout`: use a yoloq server from this machine.

The token (a team token from `yoloq team add`) is checked against the server before it is
saved, with the URL, in `$XDG_CONFIG_HOME/yoloq/credentials.toml` (mode 0600). From then
on the user commands go through that server's REST API. Without `--token` it is read from
`YOLOQ_TOKEN`, else asked for (not echoed).
"""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import print_json
from yoloq.base.errors import UserError
from yoloq.settings import settings


def add_login_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the yoloq server, e.g. http://queue-host:4211 (`yoloq up` prints it)")
    parser.add_argument("--token", help="team token (default: $YOLOQ_TOKEN, else asked for)")
    parser.add_argument("--json", action="store_true", help="one JSON object")


def add_logout_arguments(parser: argparse.ArgumentParser) -> None:
    """The saved URL and token are removed."""
    parser.add_argument("--json", action="store_true", help="one JSON object")


def run_login(args: argparse.Namespace) -> int:
    from yoloq.client import credentials
    from yoloq.client.remote import Remote

    url = credentials.normal_url(args.url)
    token = (args.token or settings().token or _ask()).strip()
    if not token:
        raise UserError("--token", "is empty", "give the team token `yoloq team add` printed")
    server = credentials.Server(url, token, "--token")
    with Remote(server) as remote:
        who = remote.get("/me")  # the token's team: a wrong token or URL fails here, nothing saved
    path = credentials.save(url, token)
    if args.json:
        print_json({"url": url, "team": who.get("team"), "admin": bool(who.get("admin")), "saved": str(path)})
        return 0
    role = " (admin)" if who.get("admin") else ""
    print(f"logged in to {url} as team {who.get('team')}{role}; saved in {path}")
    return 0


def run_logout(args: argparse.Namespace) -> int:
    from yoloq.client import credentials

    removed = credentials.forget()
    if args.json:
        print_json({"removed": removed, "path": str(credentials.credentials_path())})
        return 0
    print(f"removed {credentials.credentials_path()}" if removed else "not logged in")
    return 0


def _ask() -> str:
    if not sys.stdin.isatty():
        raise UserError("--token", "not given and no terminal to ask on",
                        "pass --token TOKEN or set YOLOQ_TOKEN")
    import getpass

    return getpass.getpass("team token: ")

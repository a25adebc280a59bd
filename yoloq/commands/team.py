"""`yoloq team add|list|rotate|remove`: the teams that may use the yoloq API, and their tokens.

Run on the server host (it edits `<state>/teams.json`, mode 0600). `add` and `rotate` print the
token once, alone on the last line (`TOKEN=$(yoloq team add vision | tail -1)`). `--admin` makes
an admin token, which manages teams, quotas and tiers through the API. `--weight` and `--cap`
go into the scheduling policy block (the stack must be up for them).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from yoloq.commands._client import print_json, print_json_lines
from yoloq.domain.tiers import TIER_NAMES
from yoloq.service.teams import add_team, list_teams, remove_team
from yoloq.views.table import Column, render

COLUMNS = (
    Column("team", ident=True, priority=0),
    Column("admin", priority=1),
    Column("weight", priority=2, right=True),
    Column("cap", priority=2),
    Column("quota", priority=2, min_width=10),
    Column("token_id", "TOKEN ID", priority=3),
    Column("label", priority=4, min_width=8),
    Column("owner", priority=5, min_width=10),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = sub.add_parser("add", help="add a team and print its token (once, on the last line)")
    add.add_argument("name")
    add.add_argument("--weight", type=float, help="fair-share weight (default 1)")
    add.add_argument("--cap", choices=TIER_NAMES, help="most urgent tier the team may use")
    add.add_argument("--owner", default="", help="owner's mail address (quota mails)")
    add.add_argument("--admin", action="store_true", help="an admin token: manages teams, quotas, tiers")
    add.add_argument("--label", default="default", help="the token's label, shown in the audit log")
    listing = sub.add_parser("list", help="teams, owners, token ids and limits (no secrets)")
    rotate = sub.add_parser("rotate", help="a new token for a team (the old one stops working)")
    rotate.add_argument("name")
    remove = sub.add_parser("remove", help="remove a team and its token (its jobs stay)")
    remove.add_argument("name")
    for each in (add, listing, rotate, remove):
        each.add_argument("--json", action="store_true",
                          help="JSON on one line (list: one object per team and line; add/rotate: with the token)")
    listing.add_argument("--wide", action="store_true", help="show every column whole, whatever the terminal's width")


def run(args: argparse.Namespace) -> int:
    from yoloq.records.teams import TeamStore

    store = TeamStore()
    if args.action == "add":
        token = add_team(store, args.name, args.weight, args.cap, args.owner, args.admin, args.label)
        kind = "admin token" if args.admin else "token"
        _tell(args.json, {"team": args.name, "admin": args.admin, "token": token},
              f"team {args.name} added; its {kind} follows (shown once, stored hashed in {store.path}):",
              token)
    elif args.action == "rotate":
        token = store.rotate(args.name)
        _tell(args.json, {"team": args.name, "token": token},
              f"new token for {args.name}; the old one no longer works:", token)
    elif args.action == "remove":
        for note in remove_team(store, args.name):
            print(f"note: {note}", file=sys.stderr)
        _tell(args.json, {"team": args.name, "removed": True},
              f"team {args.name} removed (its token no longer works; its jobs stay)")
    else:
        _list(store, args.json, args.wide)
    return 0


def _tell(as_json: bool, obj: dict, *lines: str) -> None:
    """The outcome: one JSON object, or the lines (a token alone on the last one)."""
    if as_json:
        print_json(obj)
    else:
        print("\n".join(lines))


def _list(store, as_json: bool, wide: bool = False) -> None:
    listing = list_teams(store)
    rows: list[dict[str, Any]] = listing.rows
    for note in listing.notes:
        print(f"note: {note}", file=sys.stderr)
    if as_json:
        print_json_lines(rows)
        return
    for row in rows:
        quota = row.get("quota")
        row["quota"] = f"{quota['tu']} TU/{quota['period']}" if quota else None
    print(render(rows, COLUMNS, wide=wide, empty="(no teams)"))

"""`yoloq quota TEAM --tu X [--period day|week]` / `yoloq quota TEAM --clear`: set a team's TU budget;
`yoloq quota` alone lists the budgets.

Saved in the `yoloq-policy` block (created from the current settings if missing); the
worker picks it up within 30 s. Every change is a `yoloq.team.quota_changed` event.
"""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, print_json_lines, stack_client
from yoloq.base.errors import UserError
from yoloq.views.table import Column, render

COLUMNS = (
    Column("team", ident=True, priority=0),
    Column("tu", "TU", priority=1, right=True),
    Column("period", priority=1),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("team", nargs="?", help="the team (without it: list every team's budget)")
    parser.add_argument("--tu", type=float, help="Training Units per period (1 TU = one V100 for 24 h)")
    parser.add_argument("--period", choices=("day", "week"), default="day")
    parser.add_argument("--clear", action="store_true", help="remove the team's quota")
    parser.add_argument("--reason", default="changed by user")
    parser.add_argument("--json", action="store_true", help="one JSON object (listing: one per team and line)")
    parser.add_argument("--wide", action="store_true", help="listing: show every column whole")


def run(args: argparse.Namespace) -> int:
    if args.team is None:
        if args.tu is not None or args.clear:
            raise UserError("team", "is required to set or clear a quota", "write `yoloq quota TEAM --tu 2.5`")
        return list_quotas(args.json, args.wide)
    if not args.clear and (args.tu is None or args.tu <= 0):
        raise UserError("--tu", "a positive budget is required", "give --tu 2.5 (or --clear)")
    from yoloq.records.policy_edit import set_quota

    with stack_client():
        old = set_quota(args.team, None if args.clear else args.tu, args.period, args.reason)
    if args.json:
        print_json({"team": args.team, "old": old,
                    "new": None if args.clear else {"tu": args.tu, "period": args.period}})
        return 0
    print(f"quota of {args.team}: " + ("none" if args.clear else f"{args.tu} TU per {args.period}"))
    return 0


def list_quotas(as_json: bool, wide: bool) -> int:
    with stack_client():
        from blocks.policy import load_policy

        policy = load_policy()
    rows = [{"team": team, "tu": quota.tu, "period": quota.period} for team, quota in sorted(policy.quotas.items())]
    if as_json:
        print_json_lines(rows)
    else:
        print(render(rows, COLUMNS, wide=wide, empty="(no quotas; set one with `yoloq quota TEAM --tu 2.5`)"))
    return 0

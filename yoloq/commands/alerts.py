"""`yoloq alerts webhook URL` / `yoloq alerts block NAME`: notify when a team exceeds its quota.

Creates (or updates) the Prefect automation that turns `yoloq.team.quota_exceeded`
events into a notification, through a webhook (saved as the `yoloq-alerts` block)
or a notification block already saved on the server.
"""

from __future__ import annotations

import argparse

from yoloq.commands._client import print_json, stack_client
from yoloq.base.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="alerts_target", required=True, metavar="TARGET")
    hook = sub.add_parser("webhook", help="POST a JSON notification {subject, body} to a URL")
    hook.add_argument("url", help="http(s) URL that receives the notifications")
    block = sub.add_parser("block", help="use a saved Prefect notification block")
    block.add_argument("name", help="block name: TYPE-SLUG/NAME (e.g. slack-webhook/oncall), "
                                    "or a custom-webhook block's name")
    for target in (hook, block):
        target.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from yoloq.records.quota_alerts import AUTOMATION_NAME, QUOTA_EVENT, ensure_quota_automation

    target = args.url if args.alerts_target == "webhook" else args.name
    if args.alerts_target == "webhook" and not target.startswith(("http://", "https://")):
        raise UserError("url", f"{target!r} is not an http(s) URL", "give e.g. https://host/hook")
    with stack_client() as client:
        automation_id = ensure_quota_automation(target, client=client)
    if args.json:
        print_json({"automation": AUTOMATION_NAME, "id": str(automation_id), "event": QUOTA_EVENT,
                    "target": target})
        return 0
    print(f"automation {AUTOMATION_NAME!r} ({automation_id}): {QUOTA_EVENT} -> {target}")
    return 0

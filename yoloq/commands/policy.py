"""`yoloq policy show` and `yoloq policy set KEY=VALUE [KEY=VALUE ...]`: the scheduling policy.

`show` prints every key in force with where its value came from: `default` (the `Policy`
dataclass), `block yoloq-policy` (saved; `team`, `quota` and `policy set` write it) or
`env YOLOQ_...` (a variable of the stack's processes, which beats the block). Through a yoloq
server (`yoloq login`) it is `GET /v1/policy`; on the server host it is the stack's own API
when it answers for this shell's settings, else this shell's resolution.

`set` checks every key and value first (an unknown key or a bad value is one line, exit 2,
nothing saved), then saves them in the block; through a server it is `PUT /v1/policy`, which
takes an admin token. A key that a variable of the stack overrides keeps the variable's value:
the answer says so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from yoloq.commands._client import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="every policy key in force and where its value comes from")
    change = sub.add_parser("set", help="save policy keys in the yoloq-policy block (KEY=VALUE ...)")
    change.add_argument("assignments", nargs="+", metavar="KEY=VALUE", help="e.g. min_runtime_s=0")
    show.add_argument("--wide", action="store_true", help="show long values whole")
    for each in (show, change):
        each.add_argument("--json", action="store_true", help="print the policy document (GET /v1/policy)")


def run(args: argparse.Namespace) -> int:
    if args.action == "set":
        from yoloq.records.policy_edit import parse_assignments

        values = parse_assignments(args.assignments)  # a bad key fails here, before any call
        document = _set(values)
        if args.json:
            print_json(document)
            return 0
        print(f"saved in the yoloq-policy block: {', '.join(f'{k}={v}' for k, v in values.items())}")
        for key in values:
            source = document.get("sources", {}).get(key, "")
            if source.startswith("env "):
                print(f"note: {key} stays {_value(document.get(key))}: {source.removeprefix('env ')} of the "
                      "stack overrides the block (unset it and restart the stack to use the saved value)",
                      file=sys.stderr)
        return 0
    document = _show()
    if args.json:
        print_json(document)
        return 0
    print(render(document, wide=args.wide))
    return 0


def _show() -> dict[str, Any]:
    from yoloq.client.remote import remote

    server = remote()
    if server is not None:
        with server:
            return server.get("/policy")
    from yoloq.commands._client import local_api

    api = local_api()
    if api is not None:
        with api:
            return api.get("/policy")
    return local_document()


def _set(values: dict[str, str]) -> dict[str, Any]:
    from yoloq.client.remote import remote

    server = remote()
    if server is not None:
        with server:
            return server.call("PUT", "/policy", json={"set": values})
    from yoloq.commands._client import stack_client
    from yoloq.records.policy_edit import set_policy_keys

    with stack_client():
        set_policy_keys(values)
    return local_document()


def local_document() -> dict[str, Any]:
    from blocks.policy import resolve_policy_settings
    from yoloq.api.cluster import policy_document
    from yoloq.commands._client import stack_client

    with stack_client():
        return policy_document(resolve_policy_settings())


def rows(document: dict[str, Any]) -> list[dict[str, str]]:
    """One row per policy key of a policy document: key, value in words, source."""
    sources: dict[str, str] = document.get("sources") or {}
    keys = list(sources) or [k for k in document if k not in ("source", "sources", "tiers")]
    return [{"key": key, "value": _value(document.get(key)), "source": sources.get(key, document.get("source", ""))}
            for key in keys]


def render(document: dict[str, Any], wide: bool = False) -> str:
    """The table `yoloq up` and `yoloq policy show` print: keys and sources whole, a long value
    (many teams' caps) cut to fit the terminal."""
    from yoloq.views.table import Column
    from yoloq.views.table import render as render_table

    columns = [Column("key", priority=0, ident=True), Column("value", priority=1, min_width=12),
               Column("source", priority=0, ident=True)]
    return render_table(rows(document), columns, wide=wide)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        if not value:
            return "-"
        return ",".join(f"{k}={_quota(v) if isinstance(v, dict) else _value(v)}" for k, v in value.items())
    return str(value)


def _quota(quota: dict[str, Any]) -> str:
    return f"{quota.get('tu'):g} TU/{quota.get('period')}"

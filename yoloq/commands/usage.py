"""`yoloq usage [--team T] [--since 7d] [--csv|--json]`: Training Units per team and job.

Computed from the segment runs' own records in Prefect (`work_pools.usage`): start and
end times, team, the GPUs held and their speed. 1 TU = one V100 for 24 h.
"""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import backend, print_json, table
from yoloq.service.usage import parse_since, usage_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--team", help="only this team")
    parser.add_argument("--since", default="7d", help="window: e.g. 90m, 24h, 7d (default 7d)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="CSV on stdout (pandas)")
    out.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    window = parse_since(args.since)
    with backend() as where:
        if where.remote is not None:
            rows = where.remote.get("/usage", since=args.since, team=args.team)["rows"]
        else:
            rows = usage_rows(window, args.team)
    if args.json:
        print_json(rows)
    elif args.csv:
        import pandas as pd

        pd.DataFrame(rows, columns=["team", "job", "segments", "gpu_s", "tu"]).to_csv(sys.stdout, index=False)
    else:
        print(table(rows, ["team", "job", "segments", "gpu_s", "tu"]))
        totals: dict[str, float] = {}
        for row in rows:
            totals[row["team"]] = totals.get(row["team"], 0.0) + row["tu"]
        for team, total in sorted(totals.items()):
            print(f"team {team}: {total:.6f} TU since {args.since} ago")
    return 0

"""`yoloq usage [--team T] [--since 7d] [--csv|--json]`: Training Units per team and job.

Computed from the segment runs' own records in Prefect (`work_pools.usage`): start and
end times, team, the GPUs held and their speed. 1 TU = one V100 for 24 h.
"""

from __future__ import annotations

import argparse
import sys

from yoloq.commands._client import backend, print_json_lines
from yoloq.service.usage import parse_since, usage_rows
from yoloq.views.table import Column, render

COLUMNS = (
    Column("team", ident=True, priority=0),
    Column("job", ident=True, priority=0),
    Column("segments", priority=2, right=True),
    Column("gpu_s", "GPU_S", priority=3, right=True),
    Column("tu", "TU", priority=1, right=True, fmt=lambda tu: f"{tu:.6f}"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--team", help="only this team")
    parser.add_argument("--since", default="7d", help="window: e.g. 90m, 24h, 7d (default 7d)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="CSV on stdout (pandas)")
    out.add_argument("--json", action="store_true", help="one JSON object per team and job, one per line")
    parser.add_argument("--wide", action="store_true", help="show every column whole, whatever the terminal's width")


def run(args: argparse.Namespace) -> int:
    window = parse_since(args.since)
    with backend() as where:
        if where.remote is not None:
            rows = where.remote.get("/usage", since=args.since, team=args.team)["rows"]
        else:
            rows = usage_rows(window, args.team)
    if args.json:
        print_json_lines(rows)
    elif args.csv:
        import pandas as pd

        pd.DataFrame(rows, columns=["team", "job", "segments", "gpu_s", "tu"]).to_csv(sys.stdout, index=False)
    else:
        print(render(rows, COLUMNS, wide=args.wide, empty="(no usage in this window)"))
        totals: dict[str, float] = {}
        for row in rows:
            totals[row["team"]] = totals.get(row["team"], 0.0) + row["tu"]
        for team, total in sorted(totals.items()):
            print(f"team {team}: {total:.6f} TU since {args.since} ago")
    return 0

"""What a Prefect API client costs to create, with and without yoloq's shared TLS context.

    python bench/client_tls.py [--clients 40]

Prefect builds a verified `ssl.SSLContext` from its CA bundle for every client; its engine,
task runs, log and event workers create many per segment. `yoloq.base.prefect_tls` shares
one verified context per CA file. Side by side in one process: `--clients` clients (half
async, half sync) created before the share is installed, then as many after; no server is
needed (a client connects on first use, not at creation). Prints the median per client of
each and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"  # never contacted

from prefect.client.orchestration import PrefectClient, SyncPrefectClient  # noqa: E402

from yoloq.base.prefect_tls import share_client_tls_context  # noqa: E402

URL = os.environ["PREFECT_API_URL"]


def per_client_ms(count: int) -> list[float]:
    times = []
    for i in range(count):
        start = time.perf_counter()
        (PrefectClient if i % 2 else SyncPrefectClient)(URL)
        times.append(1000 * (time.perf_counter() - start))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=40)
    args = parser.parse_args()
    own = statistics.median(per_client_ms(args.clients))
    share_client_tls_context()
    shared = statistics.median(per_client_ms(args.clients))
    print(f"clients: {args.clients} per way; CA file and everything else: Prefect's defaults")
    print(f"{'way':<32}{'median ms per client':>22}")
    print(f"{'a TLS context per client':<32}{own:>22.2f}")
    print(f"{'one shared verified context':<32}{shared:>22.2f}")
    print(f"ratio (per client / shared): {own / shared:.1f}x")


if __name__ == "__main__":
    main()

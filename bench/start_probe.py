"""What a segment process imports before it can train, then the time it got there.

Run as `python -m bench.start_probe OUT` (a cold start) or forked by the warm launcher
(`bench/overhead.py --starts N`): writes time.time() to OUT once the imports are done.
"""

from __future__ import annotations

import importlib
import sys
import time

from work_pools.launcher import PRELOAD

if __name__ == "__main__":
    for name in PRELOAD:
        importlib.import_module(name)
    with open(sys.argv[1], "w") as fh:
        fh.write(repr(time.time()))

"""`--wake poll,events` for the benches: run a bench once per wake mode, each in a fresh
process (so its private stack's runner and worker inherit `YOLOQ_WAKE`), and collect the
JSON each run writes for the side-by-side report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WAKES = ("poll", "events")


def parse_wakes(text: str | None) -> list[str]:
    """The wake modes asked for; exits with one line on an unknown one."""
    wakes = [w.strip() for w in (text or "").split(",") if w.strip()]
    if any(w not in WAKES for w in wakes):
        sys.exit(f"--wake: unknown mode in {text!r}; use poll, events or poll,events")
    return wakes


def _without_wake(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--wake="):
            skip = False
            continue
        skip = arg == "--wake"
        if not skip:
            out.append(arg)
    return out


def run_per_wake(script: str, wakes: list[str]) -> dict[str, Any]:
    """`script` with this process's arguments once per wake mode; {mode: its JSON}, or {}
    when a run wrote none (it failed: its own output says why)."""
    results: dict[str, Any] = {}
    for wake in wakes:
        out = Path(tempfile.mkdtemp(prefix="yoloq-bench-wake-")) / "result.json"
        print(f"== wake: {wake}", flush=True)
        subprocess.run([sys.executable, script, *_without_wake(sys.argv[1:]), "--wake", wake,
                        "--json", str(out)], check=False, env={**os.environ, "YOLOQ_WAKE": wake})
        if not out.exists():
            return {}
        results[wake] = json.loads(out.read_text())
    return results

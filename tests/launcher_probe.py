"""Run by tests/test_launcher.py as a segment forked by the warm launcher (or cold, with
`python -m`): writes what the segment sees to the JSON file named by argv[1]; with
`--hold`, starts a grandchild in its session and sleeps (for the kill test)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time


def main() -> None:
    out = sys.argv[1]
    import numpy
    import torch
    from prefect.settings import get_current_settings

    seen = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
            "cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv[1:],
            "cuda_initialized": torch.cuda.is_initialized(),
            "api_url": str(get_current_settings().api.url),
            "random": random.random(), "numpy": float(numpy.random.random()),
            "torch": float(torch.rand(1)), "main": __name__}
    if "--hold" in sys.argv:
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        seen["grandchild"] = grandchild.pid
    with open(out + ".tmp", "w") as fh:
        json.dump(seen, fh)
    os.replace(out + ".tmp", out)
    if "--hold" in sys.argv:
        time.sleep(600)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))


if __name__ == "__main__":
    main()

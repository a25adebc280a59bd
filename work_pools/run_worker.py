"""Run the `yolo-gpu` node agent (`yoloq up`, `yoloq node`), exiting promptly on SIGTERM.

The stock `prefect worker start` can take tens of seconds to exit on SIGTERM; here
SIGTERM cancels the worker, whose teardown stops its segments and marks them
crashed (their jobs resume from the last checkpoint).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from yoloq.base import offline
from yoloq.settings import exit_on_bad_settings

exit_on_bad_settings()  # a bad YOLOQ_* value: one line in the log, exit 2
offline.apply()

from work_pools.nodes import default_node_name, validate_node_name  # noqa: E402
from work_pools.worker import YoloGpuWorker  # noqa: E402
from yoloq.base.prefect_tls import share_client_tls_context  # noqa: E402
from yoloq.base.names import GPU_POOL  # noqa: E402

share_client_tls_context()


async def serve(pool: str, name: str | None) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    if name:  # the node's name is the worker's name
        os.environ["YOLOQ_NODE_NAME"] = validate_node_name(name)
    worker = YoloGpuWorker(work_pool_name=pool, name=name or default_node_name())
    try:
        await worker.start()
    except asyncio.CancelledError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default=GPU_POOL)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    asyncio.run(serve(args.pool, args.name))


if __name__ == "__main__":
    main()

"""Run the parent-flow runner (a process worker on the `yoloq-jobs` pool) for `yoloq up`.

Parent `yolo-job` runs never hold a GPU; each runs in its own process here.
"""

from __future__ import annotations

import asyncio
import signal

from yoloq import offline

offline.apply()

from prefect.workers.process import ProcessWorker  # noqa: E402
from yoloq.settings import JOBS_POOL  # noqa: E402


async def serve() -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await ProcessWorker(work_pool_name=JOBS_POOL, name="yoloq-job-runner").start()
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    asyncio.run(serve())

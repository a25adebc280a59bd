"""Run the job runner (the `yoloq-jobs` pool) for `yoloq up`.

Parent `yolo-job` runs never hold a GPU. They run as threads of this one process
(`work_pools.job_runner`), and their waits for segments share one poll
(`work_pools.segment_watch`): a waiting job costs a blocked thread, not a process.
"""

from __future__ import annotations

import asyncio
import signal

from yoloq.base import offline
from yoloq.settings import exit_on_bad_settings

exit_on_bad_settings()  # a bad YOLOQ_* value: one line in the log, exit 2
offline.apply()

from work_pools.job_runner import InProcessJobWorker, gate, parents_without_watcher_threads  # noqa: E402
from work_pools.segment_watch import SegmentWatch, install  # noqa: E402
from yoloq.base.prefect_tls import share_client_tls_context  # noqa: E402
from yoloq.base.names import JOBS_POOL  # noqa: E402

share_client_tls_context()
parents_without_watcher_threads()


async def serve() -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    install(SegmentWatch(on_wait=gate.leave))
    try:
        await InProcessJobWorker(work_pool_name=JOBS_POOL, name="yoloq-job-runner").start()
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    asyncio.run(serve())

"""What a segment process runs (`python -m work_pools.segment_engine RUN_ID`, or forked warm):
Prefect's own engine entry point, `python -m prefect.engine`, asking the engine for the run's
final state instead of its result.

A preempted segment ends in the state it chose, `Preempted` (a Cancelled type). The stock entry
point asks for the flow's result, so the engine raises that state back as `CancelledRun` and logs
"Engine execution exited with unexpected exception" with a traceback on the segment's run: an
ERROR in the Prefect UI for every normal preemption. Asked for the state, the engine records the
same final state and logs (a failed segment still logs its own exception and ends Failed),
without the false alarm. Exit codes are the stock ones: 0 once the engine has recorded the
outcome, 1 for a run id that is missing or bad.
"""

from __future__ import annotations

import os
import sys
from uuid import UUID


def main(argv: list[str]) -> None:
    from prefect._internal.control_listener import configure_from_env
    from prefect._internal.metrics import RunMetrics
    from prefect.engine import engine_logger, handle_engine_signals
    from prefect.flow_engine import flow_run_logger, load_flow, load_flow_run, run_flow

    try:
        flow_run_id = UUID(argv[1] if len(argv) > 1 else os.environ.get("PREFECT__FLOW_RUN_ID"))
    except Exception:
        engine_logger.error(f"Invalid flow run id. Received arguments: {argv}", exc_info=True)
        sys.exit(1)
    configure_from_env()  # the runner's control channel, as the stock entry point does
    with handle_engine_signals(flow_run_id):
        flow_run = load_flow_run(flow_run_id=flow_run_id)
        run_logger = flow_run_logger(flow_run=flow_run)
        try:
            flow = load_flow(flow_run)
        except Exception:
            run_logger.error("Unexpected exception encountered when trying to load flow", exc_info=True)
            raise
        with RunMetrics(flow_run, flow):
            run_flow(flow, flow_run=flow_run, error_logger=run_logger, return_type="state")


if __name__ == "__main__":
    main(sys.argv)

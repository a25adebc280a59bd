"""Trace-replay simulator: the real `decide`, simulated time, and metrics.

    from work_pools.simulate import generate, parse_cluster, simulate, summarise
    result = simulate(generate(500, "overloaded"), parse_cluster("8xA100-80GB"), yoloq())
    print(summarise(result))
"""

from work_pools.simulate.cluster import parse_cluster
from work_pools.simulate.engine import SimResult, Simulator, simulate
from work_pools.simulate.generate import REFERENCE_CLUSTER, generate
from work_pools.simulate.metrics import summarise
from work_pools.simulate.shapes import SHAPES, make_trace
from work_pools.simulate.trace import COLUMNS, TIRESIAS_COLUMNS, TraceJob, read_trace, write_trace

__all__ = ["COLUMNS", "REFERENCE_CLUSTER", "TIRESIAS_COLUMNS", "SimResult", "Simulator", "TraceJob",
           "SHAPES", "generate", "make_trace", "parse_cluster", "read_trace", "simulate", "summarise", "write_trace"]

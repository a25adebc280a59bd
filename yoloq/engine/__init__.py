"""The exact, resumable segment training engine.

A segment trains epochs [k, n) of an E-epoch job in one process and stops only
at epoch boundaries; resuming from its checkpoint (in a fresh process, from a
moved file) continues bit-identically. Import `run_segment` from here; nothing
in this package talks to Prefect.
"""

from yoloq.engine.dispatch import run_segment
from yoloq.engine.segment import NoHooks, SegmentHooks, SegmentRequest, SegmentResult

__all__ = ["NoHooks", "SegmentHooks", "SegmentRequest", "SegmentResult", "run_segment"]

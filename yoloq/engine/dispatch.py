"""`run_segment`: the model's family picks the engine that trains the segment.

Above both engines (`segment` for ultralytics, `yolov5`), which build on the segment
protocol in `segment`, so neither engine imports the other.
"""

from __future__ import annotations

from yoloq.engine.segment import (
    SegmentHooks,
    SegmentRequest,
    SegmentResult,
    run_ultralytics_segment,
)


def run_segment(request: SegmentRequest, hooks: SegmentHooks | None = None) -> SegmentResult:
    """Train one segment in this process and return where its outputs are."""
    from yoloq.analysis.models import engine_of_model

    if engine_of_model(request.spec.model) == "yolov5":
        from yoloq.engine.yolov5 import run_segment as run_yolov5

        return run_yolov5(request, hooks)
    return run_ultralytics_segment(request, hooks)

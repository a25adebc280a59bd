"""`run_segment`: the model's family picks the engine that trains the segment.

Above the engines (`segment` for ultralytics, `yolov5`, `yolonas`), which build on the
segment protocol in `segment`, so no engine imports another.
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

    engine = engine_of_model(request.spec.model)
    if engine == "yolov5":
        from yoloq.engine.yolov5 import run_segment as run_yolov5

        return run_yolov5(request, hooks)
    if engine == "yolo-nas":  # in its own environment, as a child process
        from yoloq.engine.yolonas.segment import run_segment as run_yolonas

        return run_yolonas(request, hooks)
    return run_ultralytics_segment(request, hooks)

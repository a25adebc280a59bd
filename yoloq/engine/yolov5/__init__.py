"""The second engine: original (anchor-based) YOLOv5, trained through the `yolov5` package.

Behind the same segment protocol as the ultralytics engine (`yoloq.engine.segment`):
restore from a checkpoint, train epochs [k, n) of the full schedule, checkpoint each
epoch, stop at an epoch boundary when asked. yolov5's own `train.train()` runs the
recipe; this package only feeds it options, keeps it offline (`environment`), saves
and restores the exact state it would otherwise lose (`state`), and connects its
callbacks to the segment hooks (`segment`). Import `run_segment` from here.
"""

from yoloq.engine.yolov5.segment import run_segment

__all__ = ["run_segment"]

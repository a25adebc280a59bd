"""How long a segment is: a documented target wall time per segment.

A segment is the scheduler's time slice: it can decide again at every segment
boundary. Short segments decide more often but pay ~4 s of process start each
(DESIGN.md); the default target keeps that overhead under about 1%.
"""

from __future__ import annotations

import math

from yoloq.settings import settings

TARGET_SEGMENT_S = settings().target_segment_s


def segment_epochs_for(epochs: int, est_epoch_s: float, target_s: float = TARGET_SEGMENT_S) -> int:
    """Epochs that fill about `target_s` seconds (at least 1, at most the whole job)."""
    if est_epoch_s <= 0:
        return epochs
    return max(1, min(epochs, math.floor(target_s / est_epoch_s) or 1))

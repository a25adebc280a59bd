"""yoloq: a fair, preemptive training queue for YOLO models on shared GPUs."""

__version__ = "0.1.0"

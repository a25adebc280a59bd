"""The YOLO tasks yoloq knows, in one table (as ultralytics keeps `TASK2DATA` and
`TASK2METRIC`): what each trains, the label rows its dataset must have, the metric that
compares its jobs, and how its cost differs from detection's. Adding a task is adding a row
here, its label check in `yoloq.analysis.labels`, its trainer in `yoloq.engine.trainer` and its
generator in `yoloq.datasets.synth`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    name: str  # ultralytics' task name
    label: str  # in words
    label_rows: str  # one label row, as a user writes it
    metric: str  # the MLflow metric that compares jobs of this task (ultralytics' name, parentheses dropped)
    head: str  # the model YAML's last layer
    mem_factor: float  # activation memory per image relative to detection at the same model and imgsz
    time_factor: float  # training time per image relative to detection
    example: str = "yolov8n.yaml"  # a shipped model YAML of this task
    refused: str = ""  # why yoloq does not train it yet ("" when it does)


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("detect", "detection", "cls cx cy w h", "metrics/mAP50-95B", "Detect", 1.0, 1.0),
    # Memory: measured by bench/task_costs.py (bytes autograd saves per image, device-independent):
    # segment 1.27-1.30x at imgsz 128-320, pose and OBB 1.03x. Time: CPU epochs, noisy (segment
    # 1.0-1.4x, pose 1.05-1.13x, OBB 0.96-1.13x); a GPU measurement is still to come.
    Task("segment", "segmentation", "cls x1 y1 x2 y2 ... xn yn (a polygon, n >= 3)", "metrics/mAP50-95M",
         "Segment", 1.3, 1.3, "yolov8n-seg.yaml"),
    Task("pose", "pose", "cls cx cy w h px1 py1 [v1] ... pxK pyK [vK] (K keypoints from kpt_shape)",
         "metrics/mAP50-95P", "Pose", 1.03, 1.1, "yolov8n-pose.yaml"),
    Task("obb", "oriented-box (OBB)", "cls x1 y1 x2 y2 x3 y3 x4 y4 (the 4 corners)", "metrics/mAP50-95B",
         "OBB", 1.03, 1.1, "yolov8n-obb.yaml"),
    Task("classify", "classification", "a folder per class: train/<class>/*.jpg", "metrics/accuracy_top1",
         "Classify", 0.5, 0.5, "yolov8n-cls.yaml",
         refused="yoloq's exact-resume trainer does not cover ultralytics' classification trainer and "
                 "folder datasets yet"),
    Task("semantic", "semantic segmentation", "a mask image per image", "metrics/mIoU", "Semantic", 1.5, 1.4,
         refused="yoloq's exact-resume trainer does not cover it yet"),
    Task("depth", "depth", "a depth map per image", "metrics/abs_rel", "Depth", 1.5, 1.4,
         refused="yoloq's exact-resume trainer does not cover it yet"),
)}

TRAINED_TASKS = tuple(name for name, task in TASKS.items() if not task.refused)


def task(name: str) -> Task:
    """The row for `name` (an unknown task reads as detection's cost, refused with its name)."""
    return TASKS.get(name) or Task(name, name, "", "", "", 1.0, 1.0, refused="yoloq does not know this task")

"""The YOLO tasks yoloq knows, in one table (as ultralytics keeps `TASK2DATA` and
`TASK2METRIC`): what each trains, the label rows its dataset must have, the metric that
compares its jobs, and how its cost differs from detection's. Adding a task is adding a row
here, its label check (`yoloq.analysis.labels` for text rows, `dense_labels` for masks and depth
maps, `class_folders` for classification), its trainer in `yoloq.engine.trainer` and its
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
    curves: tuple[str, ...] = ("metrics/mAP50-95B", "metrics/mAP50B", "train/box_loss")  # the job page's


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("detect", "detection", "cls cx cy w h", "metrics/mAP50-95B", "Detect", 1.0, 1.0),
    # Memory: measured by bench/task_costs.py (bytes autograd saves per image, device-independent),
    # against the same family's detection model: segment 1.27-1.30x at imgsz 128-320, pose and OBB
    # 1.03x, classify 0.57-0.59x, semantic 0.84-0.86x, depth 1.30-1.35x (yolo26n). Time: CPU
    # epochs, noisy (segment 1.0-1.44x, pose 1.02-1.13x, OBB 0.96-1.19x, classify 0.50-1.04x,
    # semantic 0.91-1.01x, depth 2.95-3.03x); a GPU measurement is still to come.
    Task("segment", "segmentation", "cls x1 y1 x2 y2 ... xn yn (a polygon, n >= 3)", "metrics/mAP50-95M",
         "Segment", 1.3, 1.3, "yolov8n-seg.yaml",
         curves=("metrics/mAP50-95M", "metrics/mAP50-95B", "train/seg_loss")),
    Task("pose", "pose", "cls cx cy w h px1 py1 [v1] ... pxK pyK [vK] (K keypoints from kpt_shape)",
         "metrics/mAP50-95P", "Pose", 1.03, 1.1, "yolov8n-pose.yaml",
         curves=("metrics/mAP50-95P", "metrics/mAP50-95B", "train/pose_loss")),
    Task("obb", "oriented-box (OBB)", "cls x1 y1 x2 y2 x3 y3 x4 y4 (the 4 corners)", "metrics/mAP50-95B",
         "OBB", 1.03, 1.1, "yolov8n-obb.yaml"),
    Task("classify", "classification", "a folder per class: train/<class>/*.jpg", "metrics/accuracy_top1",
         "Classify", 0.59, 0.56, "yolov8n-cls.yaml",
         curves=("metrics/accuracy_top1", "metrics/accuracy_top5", "train/loss")),
    Task("semantic", "semantic segmentation", "a mask PNG per image (masks/<split>/, pixel = class id, 255 = "
         "ignore), or polygon rows", "metrics/mIoU", "Semantic", 0.86, 1.0, "yolo26n-sem.yaml",
         curves=("metrics/mIoU", "metrics/pixel_acc", "train/ce_loss")),
    Task("depth", "depth", "a depth PNG per image (depth/<split>/, uint16, depth_scale per metre) or .npy "
         "(metres)", "metrics/delta1", "Depth", 1.35, 3.0, "yolo26n-depth.yaml",
         curves=("metrics/delta1", "metrics/abs_rel", "train/dlog_loss")),
)}

TRAINED_TASKS = tuple(name for name, task in TASKS.items() if not task.refused)


def task_of_metrics(logged: set[str] | dict[str, float]) -> Task:
    """The task whose own metric a run logged (detection's, also OBB's, when none is more specific)."""
    specific = [t for t in TASKS.values() if not t.refused and t.metric != TASKS["detect"].metric]
    return next((t for t in specific if t.metric in logged), TASKS["detect"])


def task(name: str) -> Task:
    """The row for `name` (an unknown task reads as detection's cost, refused with its name)."""
    return TASKS.get(name) or Task(name, name, "", "", "", 1.0, 1.0, refused="yoloq does not know this task")

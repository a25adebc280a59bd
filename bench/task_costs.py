"""What an epoch of each task costs beside a detection epoch: the measured factors
behind `yoloq/domain/tasks.py`'s `mem_factor` and `time_factor`.

    python bench/task_costs.py [--imgsz 128] [--batch 8] [--images 32] [--epochs 3] [--rounds 2]

Each task trains its nano model (`yolov8n.yaml`, `-seg`, `-pose`, `-obb`, `-cls`; `yolo26n-sem` and
`yolo26n-depth`, which exist only in the yolo26 family, beside `yolo26n.yaml`, row `detect26`) with
ultralytics on the same synthetic shapes (`yoloq dataset synth --task`), CPU, `workers=0`, no validation; the tasks
take turns, `--rounds` times, so that a load on the machine falls on all of them alike. Two
figures per task, each relative to the detection model of its family:

- time: seconds per training image, the median over epochs 2.. of every round (epoch 1 builds
  caches and warms up);
- memory: bytes of the tensors autograd saves for the backward pass, per image (the activation
  memory a GPU holds at its peak; the same on any device, so a CPU measures it).

Prints one row per task and the table's factor beside the measured one. Settings that differ
from ultralytics' defaults: imgsz, batch, epochs, `val=False`, `plots=False`, `workers=0`,
`amp=False` (CPU), the synthetic dataset.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# task -> (its nano model, the detection model of the same family it is compared with)
MODELS = {"detect": ("yolov8n.yaml", "detect"), "segment": ("yolov8n-seg.yaml", "detect"),
          "pose": ("yolov8n-pose.yaml", "detect"), "obb": ("yolov8n-obb.yaml", "detect"),
          "classify": ("yolov8n-cls.yaml", "detect"), "detect26": ("yolo26n.yaml", "detect26"),
          "semantic": ("yolo26n-sem.yaml", "detect26"), "depth": ("yolo26n-depth.yaml", "detect26")}


def measure(task: str, data: Path, args: argparse.Namespace, project: Path) -> tuple[list[float], float]:
    """(seconds per image of each epoch after the first, saved-tensor bytes per image)."""
    import torch
    from ultralytics import YOLO

    from yoloq.engine.evaluate import quiet_ultralytics

    quiet_ultralytics()
    model = YOLO(MODELS[task][0])
    marks: dict[str, float] = {}
    per_image: list[float] = []
    saved = {"bytes": 0, "images": 0, "counting": False}

    def start(trainer) -> None:
        marks["t"] = time.perf_counter()
        saved["counting"] = trainer.epoch == 1  # the second epoch: after warm-up, before close_mosaic

    def end(trainer) -> None:
        images = len(trainer.train_loader.dataset)
        if trainer.epoch >= 1:
            per_image.append((time.perf_counter() - marks["t"]) / images)
        if saved["counting"]:
            saved["images"] += images
            saved["counting"] = False

    def pack(tensor):
        if saved["counting"]:
            saved["bytes"] += tensor.numel() * tensor.element_size()
        return tensor

    model.add_callback("on_train_epoch_start", start)
    model.add_callback("on_train_epoch_end", end)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.train(data=str(data), epochs=args.epochs, imgsz=args.imgsz, batch=args.batch, workers=0,
                    val=False, plots=False, amp=False, device="cpu", project=str(project), name=task,
                    exist_ok=True, verbose=False, seed=0, close_mosaic=0)
    return per_image, saved["bytes"] / max(saved["images"], 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--images", type=int, default=32, help="training images per dataset")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    from yoloq.base import offline
    from yoloq.datasets.synth import synth_dataset
    from yoloq.domain.tasks import TASKS

    offline.apply()
    times: dict[str, list[float]] = {task: [] for task in MODELS}
    memory: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="yoloq-task-costs-") as tmp:
        root = Path(tmp)
        data = {task: synth_dataset(root / task, train=args.images, val=3, imgsz=args.imgsz, seed=0,
                                    task="detect" if task == "detect26" else task)
                for task in MODELS}
        for _ in range(args.rounds):
            for task in MODELS:
                per_image, saved = measure(task, data[task], args, root / "runs")
                times[task] += per_image
                memory[task] = saved
    print(f"imgsz {args.imgsz}, batch {args.batch}, {args.images} images, {args.epochs} epochs x "
          f"{args.rounds} rounds, CPU")
    print(f"{'task':<8} {'ms/img':>7} {'time x':>7} {'table':>6} {'MB/img':>7} {'mem x':>6} {'table':>6}")
    for task, (_, base) in MODELS.items():
        ms = statistics.median(times[task]) * 1000
        base_ms = statistics.median(times[base]) * 1000
        row = TASKS.get(task, TASKS["detect"])
        print(f"{task:<8} {ms:7.1f} {ms / base_ms:7.2f} {row.time_factor:6.2f} "
              f"{memory[task] / 1e6:7.1f} {memory[task] / memory[base]:6.2f} {row.mem_factor:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

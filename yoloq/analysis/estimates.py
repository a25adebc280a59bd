"""Peak GPU memory, the largest batch that fits, and training time: a model with stated constants.

These are planning figures for the scheduler (placement, grace times, segment
sizes), not measurements. Every constant below says where it comes from; they
can be recalibrated from real runs without touching the formulas.

Memory (GB)   = CUDA_CONTEXT_GB
              + params * BYTES_PER_PARAM                        (weights, grads, optimizer, EMA)
              + batch * (imgsz / 640)^2 * act_gb_per_image      (activations)
act_gb_per_image = ACT_BASE_GB + ACT_GB_PER_GFLOP * GFLOPs(640), times AMP_OFF_FACTOR without AMP.

Time per training image (s) = (1 / (V100_IMAGES_PER_S[scale] * gpu.speed))
                              * ((imgsz / 640)^2 + IMAGE_OVERHEAD)
Epoch (s) = train_images * t + val_images * t * VAL_COST + EPOCH_OVERHEAD_S
Duration (s) = START_OVERHEAD_S + epochs * epoch
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from yoloq.domain.gpus import GpuType
from yoloq.domain.spec import MAX_BATCH

# CUDA context, cuDNN/cuBLAS workspaces and allocator slack of a torch training process
# (typically 0.5-1 GB on current GPUs; not counted by ultralytics' GPU_mem column).
CUDA_CONTEXT_GB = 0.9
# fp32 weights (4) + gradients (4) + SGD momentum or half of AdamW's two moments (4) + EMA copy (4).
BYTES_PER_PARAM = 16
# Activation memory per 640-px image with AMP, linear in the model's GFLOPs: fitted by hand to the
# GPU_mem ultralytics prints for YOLOv8 n..x at batch 16 (about 2.5 GB for n, 14 GB for x).
ACT_BASE_GB = 0.075
ACT_GB_PER_GFLOP = 0.0027
AMP_OFF_FACTOR = 1.7  # fp32 activations instead of mostly fp16
USABLE_FRACTION = 0.9  # leave 10% of the card for fragmentation and peaks
# Training images/s on one V100 at 640 px with AMP, per scale: COCO (118,287 images) x 300 epochs in
# 1/2/4/6/8 days for n/s/m/l/x (ultralytics/yolov5 README). t, b, c, e are placed by their GFLOPs.
V100_IMAGES_PER_S = {"n": 410.0, "t": 410.0, "s": 205.0, "m": 103.0, "b": 85.0, "c": 75.0, "l": 68.0,
                     "x": 51.0, "e": 51.0}
# A fixed per-image cost (loading, augmentation, loss, small kernels) as a fraction of the 640-px cost,
# so that 64-px images are not 100x faster. Calibrated on this project's 2-core CPU: yolov8n at 64 px
# measured 7-12 ms per image; the model gives 9.8 ms.
IMAGE_OVERHEAD = 0.03
VAL_COST = 0.35  # a validation image (forward + NMS) relative to a training image
EPOCH_OVERHEAD_S = 0.5  # per epoch: validation setup and checkpoint write
START_OVERHEAD_S = 4.0  # per segment process: imports, model build, dataset cache (measured ~4 s here)


@dataclass(frozen=True)
class MemoryEstimate:
    gpu: str
    est_gpu_mem_gb: float  # at the spec's batch
    max_batch: int  # largest batch whose estimate fits USABLE_FRACTION of the GPU (0: not even 1)
    fits: bool


@dataclass(frozen=True)
class TimeEstimate:
    gpu: str
    images_per_s: float
    est_epoch_s: float
    est_duration_s: float


def activation_gb_per_image(gflops: float, imgsz: int, amp: bool = True) -> float:
    per_image = (ACT_BASE_GB + ACT_GB_PER_GFLOP * gflops) * (imgsz / 640) ** 2
    return per_image if amp else per_image * AMP_OFF_FACTOR


def peak_memory_gb(params_m: float, gflops: float, imgsz: int, batch: int, amp: bool = True) -> float:
    fixed = CUDA_CONTEXT_GB + params_m * 1e6 * BYTES_PER_PARAM / 1e9
    return fixed + batch * activation_gb_per_image(gflops, imgsz, amp)


def max_batch(params_m: float, gflops: float, imgsz: int, gpu: GpuType, amp: bool = True) -> int:
    """Largest batch whose estimate fits USABLE_FRACTION of the GPU type."""
    return batch_capacity(params_m, gflops, imgsz, gpu.mem_gb, amp)


def batch_capacity(params_m: float, gflops: float, imgsz: int, mem_gb: float, amp: bool = True) -> int:
    """Largest batch whose estimate fits USABLE_FRACTION of `mem_gb`, never above the spec's
    own limit MAX_BATCH (0: not even one image)."""
    budget = mem_gb * USABLE_FRACTION - peak_memory_gb(params_m, gflops, imgsz, 0, amp)
    return min(MAX_BATCH, max(0, math.floor(budget / activation_gb_per_image(gflops, imgsz, amp))))


def estimate_memory(params_m: float, gflops: float, imgsz: int, batch: int, gpu: GpuType,
                    amp: bool = True) -> MemoryEstimate:
    peak = peak_memory_gb(params_m, gflops, imgsz, batch, amp)
    largest = max_batch(params_m, gflops, imgsz, gpu, amp)
    return MemoryEstimate(gpu=gpu.name, est_gpu_mem_gb=round(peak, 2), max_batch=largest,
                          fits=batch <= largest)


def images_per_s(scale: str, imgsz: int, gpu: GpuType) -> float:
    """Training throughput on `gpu` at `imgsz`."""
    at_640 = V100_IMAGES_PER_S.get(scale, V100_IMAGES_PER_S["n"]) * gpu.speed
    return at_640 / ((imgsz / 640) ** 2 + IMAGE_OVERHEAD)


def estimate_time(scale: str, imgsz: int, epochs: int, train_images: int, val_images: int,
                  gpu: GpuType, task_factor: float = 1.0) -> TimeEstimate:
    """`task_factor`: the task's training time per image relative to detection (`domain.tasks`)."""
    rate = images_per_s(scale, imgsz, gpu) / task_factor
    epoch_s = (train_images + val_images * VAL_COST) / rate + EPOCH_OVERHEAD_S
    return TimeEstimate(gpu=gpu.name, images_per_s=round(rate, 1), est_epoch_s=round(epoch_s, 2),
                        est_duration_s=round(START_OVERHEAD_S + epochs * epoch_s, 1))

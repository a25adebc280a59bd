"""Exact resume on one device: yolov8n in one go (twice) and in 2+1 epochs, compared bit for bit.

    python bench/gpu_exactness.py [--device 0] [--images 64] [--imgsz 320] [--epochs 3]

Each run is a fresh `python tests/segment_cli.py` process (what a segment runs); the
segmented run's checkpoint is moved to another folder before it resumes. The two one-go runs
show whether the device is deterministic run to run at all (CUDA: ultralytics'
`deterministic=True` calls `torch.use_deterministic_algorithms(True, warn_only=True)` and the
wrapper sets `CUBLAS_WORKSPACE_CONFIG=:4096:8`; an op without a deterministic kernel only
warns, and the warning count is reported). The last line is JSON (bench/gpu_check.py reads it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

SEGMENT_CLI = Path(__file__).resolve().parents[1] / "tests" / "segment_cli.py"  # a test helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WARNING = "does not have a deterministic implementation"


def segment(spec: Path, workdir: Path, stop_after: int, device: str,
            resume_from: Path | None = None) -> tuple[Path, int]:
    """One segment process; (its checkpoint, deterministic-kernel warnings it printed)."""
    result = workdir.with_suffix(".json")
    cmd = [sys.executable, str(SEGMENT_CLI), "--spec", str(spec), "--workdir",
           str(workdir), "--stop-after", str(stop_after), "--result", str(result), "--device", device]
    if resume_from is not None:
        cmd += ["--resume-from", str(resume_from)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        sys.exit(f"segment failed: {proc.stderr[-2000:]}")
    out = json.loads(result.read_text())
    return Path(out["result"]["checkpoint"]), (proc.stdout + proc.stderr).count(WARNING)


def weights(path: Path) -> dict:
    import torch

    saved = torch.load(path, map_location="cpu", weights_only=False)["yoloq"]
    return {"model": saved["model"], "ema": saved["ema"]}


def compare(a: Path, b: Path) -> dict:
    """Tensors that differ and the largest absolute difference, over model and EMA."""
    left, right = weights(a), weights(b)
    differing, max_diff = 0, 0.0
    for part in ("model", "ema"):
        for name, tensor in left[part].items():
            other = right[part][name]
            if not tensor.equal(other):
                differing += 1
                if tensor.is_floating_point():
                    max_diff = max(max_diff, float((tensor.double() - other.double()).abs().max()))
    return {"bit_identical": differing == 0, "tensors_differing": differing, "max_abs_diff": max_diff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="0")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/yoloq-gpu-exactness"))
    args = parser.parse_args()
    from yoloq.datasets.synth import synth_dataset

    root = args.workdir
    shutil.rmtree(root, ignore_errors=True)
    data = synth_dataset(root / "data", train=args.images, val=max(4, args.images // 4),
                         imgsz=args.imgsz, nc=3, seed=0)
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "exact", "team": "gpu-check", "model": "yolov8n.yaml", "data": str(data),
        "epochs": args.epochs, "imgsz": args.imgsz, "batch": 8,
        "train_args": {"seed": 3, "plots": False, "close_mosaic": 1, "nbs": 8, "workers": 0,
                       "deterministic": True}}))
    start = time.perf_counter()
    first, warn_a = segment(spec, root / "one-go-a", args.epochs, args.device)
    second, warn_b = segment(spec, root / "one-go-b", args.epochs, args.device)
    head = max(1, args.epochs - 1)
    part, warn_c = segment(spec, root / "seg-0", head, args.device)
    moved = root / "store" / "job-epoch.ckpt"
    moved.parent.mkdir(parents=True)
    shutil.move(part, moved)
    final, warn_d = segment(spec, root / "seg-1", args.epochs, args.device, moved)
    print(json.dumps({
        "device": args.device, "epochs": args.epochs, "split": f"{head}+{args.epochs - head}",
        "images": args.images, "imgsz": args.imgsz,
        "run_to_run": compare(first, second), "resumed_vs_one_go": compare(first, final),
        "nondeterministic_op_warnings": warn_a + warn_b + warn_c + warn_d,
        "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()

"""How exact a resumed yolov5 segment is: one segment against two, in fresh processes.

    python bench/yolov5_resume.py [--epochs 8] [--stop 6] [--split 5] [--batch 8] [--images 16]

Trains yolov5n (the yolov5 package's YAML, synthetic shapes at 64 px, CPU) through
yoloq's yolov5 engine twice, each segment a fresh `python tests/segment_cli.py`
process: epochs [0, stop) in one segment, and [0, split) + [split, stop). Prints
max |dw| of the fp32 model, EMA and SGD momentum after `stop` epochs, and yolov5's
`accumulate` at the split (exactness.accumulate_at: 1 means the boundary is exact).
The README figures: `--split 1 --stop 2 --epochs 3 --seed 3` (0 everywhere) and the
defaults (`accumulate` 2 at epoch 5).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yoloq.engine.yolov5.exactness import accumulate_at
from yoloq.datasets.synth import synth_dataset

SEGMENT_CLI = Path(__file__).resolve().parents[1] / "tests" / "segment_cli.py"  # a test helper


def segment(spec: Path, workdir: Path, stop: int, resume: Path | None = None) -> Path:
    argv = [sys.executable, str(SEGMENT_CLI), "--spec", str(spec), "--workdir", str(workdir),
            "--stop-after", str(stop)] + (["--resume-from", str(resume)] if resume else [])
    subprocess.run(argv, check=True, capture_output=True)
    return workdir / "weights" / "last.pt"


def max_diff(left: dict, right: dict) -> float:
    return max(float((left[k].double() - right[k].double()).abs().max()) for k in left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--stop", type=int, default=6)
    parser.add_argument("--split", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    root = Path(tempfile.mkdtemp(prefix="yolov5-resume-"))
    model = Path(importlib.util.find_spec("yolov5").origin).parent / "models" / "yolov5n.yaml"
    data = synth_dataset(root / "ds", train=args.images, val=4, imgsz=64, seed=0)
    spec = root / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "bench", "team": "bench", "model": str(model), "data": str(data),
                                    "epochs": args.epochs, "imgsz": 64, "batch": args.batch,
                                    "train_args": {"seed": args.seed}}))
    one = segment(spec, root / "one", args.stop)
    first = segment(spec, root / "first", args.split)
    two = segment(spec, root / "second", args.stop, resume=first)
    a, b = (torch.load(p, map_location="cpu", weights_only=False)["yoloq"] for p in (one, two))
    momentum = [{str(k): v["momentum_buffer"] for k, v in s["optimizer"]["state"].items()} for s in (a, b)]
    nb = -(-args.images // args.batch)
    print(f"accumulate at epoch {args.split}: {accumulate_at(args.split, args.batch, nb, 3.0)}")
    print(f"[0,{args.stop}) vs [0,{args.split})+[{args.split},{args.stop}): max|dw| model "
          f"{max_diff(a['model'], b['model']):.3g}, ema {max_diff(a['ema'], b['ema']):.3g}, "
          f"momentum {max_diff(*momentum):.3g}")


if __name__ == "__main__":
    main()

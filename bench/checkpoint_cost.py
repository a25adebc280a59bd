"""What a checkpoint costs, and the checkpoint interval yoloq chooses from it.

    python bench/checkpoint_cost.py [--repeat 5] [--s3]

Trains one epoch of yolov8n.yaml (64 px, synthetic shapes, CPU) through yoloq's
engine to get a real resumable checkpoint (`last.pt` with yoloq's fp32 extras),
then times `save_checkpoint` of that file into the local folder store
(`blocks.checkpoints.LocalCheckpointStore`, atomic write + sha256 + metadata),
and into S3 when the cluster profile's S3 server is up
(`profiles/cluster/services.sh start s3`; `--s3` makes its absence an error).
The chosen interval (`work_pools.policy.checkpoints.checkpoint_interval`: at most
2% of training time, a crash loses at most 600 s) is printed for a few epoch
times, with the measured write time and with 10x it (a slow shared store).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ROOT = Path(__file__).resolve().parents[1]

from work_pools.policy.checkpoints import checkpoint_interval  # noqa: E402

EPOCH_TIMES_S = (10.0, 60.0, 300.0, 1200.0)


def real_checkpoint(root: Path) -> tuple[Path, float]:
    """(resumable last.pt, wall seconds of its one training epoch)."""
    from yoloq.engine import SegmentRequest, run_segment
    from yoloq.domain.spec import parse_spec
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(root / "data", train=16, val=8, imgsz=64, nc=3, seed=0)
    spec = parse_spec({"name": "ckpt-cost", "team": "bench", "model": "yolov8n.yaml",
                       "data": str(data), "epochs": 3, "imgsz": 64, "batch": 8,
                       "train_args": {"seed": 0, "plots": False, "workers": 0}})
    start = time.perf_counter()
    result = run_segment(SegmentRequest(spec, root / "work", stop_after_epoch=1))
    return result.checkpoint, time.perf_counter() - start


def time_saves(store, path: Path, repeat: int) -> list[float]:
    times = []
    for n in range(repeat):
        start = time.perf_counter()
        store.save_checkpoint("bench-ckpt", n + 1, path)
        times.append(time.perf_counter() - start)
    return times


def s3_store():
    """The cluster profile's S3 store, or None with the reason."""
    script = ROOT / "profiles" / "cluster" / "services.sh"
    try:
        env = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"services.sh env failed: {exc}"
    values = {}
    for line in env.stdout.splitlines():
        line = line.removeprefix("export ").strip()
        if "=" in line:
            key, _, value = line.partition("=")
            values[key] = value.strip("'\"")
    endpoint = values.get("AWS_ENDPOINT_URL") or values.get("YOLOQ_S3_ENDPOINT_URL")
    if not endpoint:
        return None, "no S3 endpoint in `services.sh env`"
    os.environ.update(values)
    try:
        from blocks.checkpoints import store_from_uri

        bucket = values.get("YOLOQ_S3_BUCKET", "yoloq")
        store = store_from_uri(f"s3://{bucket}/bench/checkpoint-cost")
        store.list("bench-ckpt")
        return store, ""
    except Exception as exc:  # noqa: BLE001 - report why S3 is not usable, in one line
        return None, f"S3 at {endpoint} not reachable ({type(exc).__name__}: {exc})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--s3", action="store_true", help="fail when the S3 server is not up")
    args = parser.parse_args()
    from blocks.checkpoints import LocalCheckpointStore

    with tempfile.TemporaryDirectory(prefix="yoloq-ckpt-") as tmp:
        root = Path(tmp)
        checkpoint, epoch_wall = real_checkpoint(root)
        size = checkpoint.stat().st_size
        stores = {"folder": LocalCheckpointStore(path=str(root / "store"))}
        s3, why = s3_store()
        if s3 is not None:
            stores["s3"] = s3
        elif args.s3:
            sys.exit(f"error: S3: {why} (fix: profiles/cluster/services.sh start s3)")
        print(f"resumable yolov8n checkpoint: {size / 1e6:.1f} MB "
              f"(one 64 px epoch on 16 images took {epoch_wall:.1f} s incl. startup)")
        measured = {}
        for name, store in stores.items():
            times = time_saves(store, checkpoint, args.repeat)
            measured[name] = statistics.median(times)
            store.delete_job("bench-ckpt")
            print(f"  save to {name}: median {measured[name]:.3f} s over {args.repeat} "
                  f"({size / 1e6 / measured[name]:.0f} MB/s)")
        if s3 is None:
            print(f"  S3: not measured: {why} (start it with profiles/cluster/services.sh start s3)")
        print("\ninterval chosen (<= 2% overhead, crash loses <= 600 s):")
        print(f"  {'store':<12}{'write s':>8}  " + "  ".join(f"epoch {e:>5.0f} s" for e in EPOCH_TIMES_S))
        for name, cost in [*measured.items(), *((f"{n} x10", 10 * c) for n, c in measured.items())]:
            plans = [checkpoint_interval(e, cost) for e in EPOCH_TIMES_S]
            cells = [f"{p.every_epochs:>3} ep {p.overhead * 100:4.1f}%"
                     + ("" if p.overhead_met and p.loss_met else "!") for p in plans]
            print(f"  {name:<12}{cost:>8.3f}  " + "  ".join(f"{c:>13}" for c in cells))
        print("  (! = a bound cannot hold: the crash-loss bound wins, or one epoch exceeds it)")


if __name__ == "__main__":
    main()

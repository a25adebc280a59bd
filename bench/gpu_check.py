"""One command for a lent GPU host: what yoloq does on a real GPU, in under 10 minutes.

    bash bench/gpu_check.sh [--cpu-smoke] [--out DIR]      # the wrapper sets the environment

Steps (each in its own process with a time limit; a failed step is reported, the rest run):

1. env          torch, CUDA, the GPU's name, the deterministic settings in force;
2. inventory    the worker's NVML inventory (`work_pools.inventory.inventory()`, what the
                yolo-gpu worker publishes), with no declared slots;
3. exactness    yolov8n through yoloq's segment engine on the GPU: one go twice (run-to-run
                determinism) and 2+1 epochs with the checkpoint moved in between (resume);
                final model and EMA weights compared bit for bit, max |difference| shown;
4. checkpoint   `bench/checkpoint_cost.py`: write time of a real checkpoint to the folder store;
5. decide       `bench/decide.py`: one scheduling decision, 10,000 waiting on 256 GPUs;
6. overhead     `bench/overhead.py --modes warm`: yoloq against plain ultralytics, yolov8n,
                640 px, 300 synthetic images, 3 epochs, on a private stack whose worker
                inventories the real GPU (NVML);
7. preemption   `bench/preemption.py`: a real job preempted and resumed on the GPU by an
                urgent one, through the stack (latencies, epoch it stopped at/resumed from).

Figures go to OUT/gpu_check.json and OUT/gpu_check.md, every step's output to
OUT/gpu_check.log. `--cpu-smoke` runs the same steps at tiny sizes on the CPU (declared
slot, no NVML) to show the script works end to end where no GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 570.0  # the whole check, under the 10 minutes a lent host gives one command
SMOKE_BUDGET_S = 1800.0  # a loaded 2-core host, tiny sizes


@dataclass(frozen=True)
class Sizes:
    exact_images: int
    exact_imgsz: int
    exact_epochs: int
    overhead: tuple[str, ...]
    preemption: tuple[str, ...]
    decide: tuple[str, ...]
    checkpoint: tuple[str, ...]


GPU = Sizes(64, 320, 3, ("--modes", "warm", "--epochs", "3", "--images", "300", "--imgsz", "640"),
            ("--preemptions", "2", "--low-images", "256", "--imgsz", "320"),
            ("--repeat", "5"), ("--repeat", "5"))
SMOKE = Sizes(8, 64, 3, ("--modes", "warm", "--epochs", "1", "--images", "8", "--imgsz", "64"),
              ("--preemptions", "1", "--low-images", "16", "--imgsz", "64"),
              ("--waiting", "500", "--gpus", "32", "--nodes", "4", "--repeat", "2"), ("--repeat", "2"))

ENV_PROBE = """
import json, os, torch
cuda = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda_available": cuda,
    "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "cudnn": torch.backends.cudnn.version() if cuda else None,
    "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    "python": __import__("sys").version.split()[0]}))
"""
INVENTORY_PROBE = """
import json, os
os.environ.pop("YOLOQ_DECLARED_GPUS", None)
from work_pools.inventory import inventory
print(json.dumps([{"index": g.index, "name": g.name, "kind": g.kind, "mem_total_gb":
    round(g.mem_total_gb, 1), "mem_free_gb": round(g.mem_free_gb, 1)} for g in inventory()]))
"""


class Check:
    """Runs the steps, appending their output to one log and their figures to one summary."""

    def __init__(self, out: Path, smoke: bool) -> None:
        self.out, self.smoke = out, smoke
        self.sizes = SMOKE if smoke else GPU
        self.started = time.monotonic()
        self.budget_s = SMOKE_BUDGET_S if smoke else BUDGET_S
        self.summary: dict[str, object] = {"mode": "cpu-smoke" if smoke else "gpu", "steps": {}}
        self.log = (out / "gpu_check.log").open("a")

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, name: str, cmd: list[str], limit_s: float, env: dict[str, str] | None = None) -> str:
        """One step's process; its output goes to the log; returns it ('' when it failed)."""
        limit = max(10.0, min(limit_s, self.left_s()))
        self.log.write(f"\n=== {name}: {' '.join(cmd)} (limit {limit:.0f} s)\n")
        self.log.flush()
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit,
                                  env={**os.environ, **(env or {})}, check=False)
            output, ok = proc.stdout + proc.stderr, proc.returncode == 0
            status = "ok" if ok else f"failed (exit {proc.returncode})"
        except subprocess.TimeoutExpired as exc:
            output, ok, status = _text(exc.stdout) + _text(exc.stderr), False, f"timed out ({limit:.0f} s)"
        self.log.write(output)
        self.log.write(f"=== {name}: {status} in {time.monotonic() - start:.1f} s\n")
        self.log.flush()
        self.summary["steps"][name] = {"status": status, "seconds": round(time.monotonic() - start, 1)}
        print(f"{name}: {status} ({time.monotonic() - start:.0f} s)", flush=True)
        return output if ok else ""

    def record(self, name: str, **figures: object) -> None:
        self.summary["steps"][name].update(figures)

    def finish(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.summary, indent=2, default=str))
        (self.out / "gpu_check.md").write_text(markdown(self.summary))
        self.log.close()


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _lines(output: str, *patterns: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if any(re.search(p, line) for p in patterns)]


def step_env(check: Check) -> bool:
    out = check.run("env", [sys.executable, "-c", ENV_PROBE], 120)
    if out:
        check.record("env", **json.loads(out.strip().splitlines()[-1]))
        check.summary["gpu"] = check.summary["steps"]["env"].get("gpu")
    return bool(out) and (check.smoke or check.summary["steps"]["env"].get("cuda_available"))


def step_inventory(check: Check) -> None:
    out = check.run("inventory", [sys.executable, "-c", INVENTORY_PROBE], 60)
    if out:
        check.record("inventory", gpus=json.loads(out.strip().splitlines()[-1]))


def step_exactness(check: Check) -> None:
    s = check.sizes
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_exactness.py"), "--images", str(s.exact_images),
           "--imgsz", str(s.exact_imgsz), "--epochs", str(s.exact_epochs),
           "--device", "cpu" if check.smoke else "0", "--workdir", "/tmp/yoloq-gpu-exactness"]
    out = check.run("exactness", cmd, 240)
    if out:
        check.record("exactness", **json.loads(out.strip().splitlines()[-1]))


def step_bench(check: Check, name: str, script: str, args: tuple[str, ...], limit_s: float,
               patterns: tuple[str, ...]) -> None:
    env = {"YOLOQ_BENCH_GPUS": "1xCPU:8" if check.smoke else ""}  # "": the worker uses NVML
    out = check.run(name, [sys.executable, str(ROOT / "bench" / script), *args], limit_s, env)
    if out:
        check.record(name, lines=_lines(out, *patterns))


def markdown(summary: dict) -> str:
    rows = [f"# bench/gpu_check ({summary['mode']}, GPU: {summary.get('gpu') or 'none'})", ""]
    for name, step in summary["steps"].items():
        rows.append(f"## {name}: {step['status']} in {step['seconds']} s")
        for key, value in step.items():
            if key in ("status", "seconds"):
                continue
            if isinstance(value, list) and value and isinstance(value[0], str):
                rows += [f"    {line}" for line in value]
            else:
                rows.append(f"- {key}: {json.dumps(value, default=str)}")
        rows.append("")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU, no GPU")
    parser.add_argument("--out", type=Path, default=Path("/tmp/yoloq-gpu-check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.cpu_smoke)
    try:
        if not step_env(check):
            print("env: no CUDA device; run with --cpu-smoke on a host without a GPU", file=sys.stderr)
            sys.exit(1)
        step_inventory(check)
        step_exactness(check)
        step_bench(check, "checkpoint", "checkpoint_cost.py", check.sizes.checkpoint, 120,
                   (r"save|write|interval|MB", r"^\s+(folder|s3)"))
        step_bench(check, "decide", "decide.py", check.sizes.decide, 90, (r"decide|ms",))
        step_bench(check, "overhead", "overhead.py", check.sizes.overhead, 300,
                   (r"^ratio", r"^warm ", r"plain ultralytics", r"yoloq warm"))
        step_bench(check, "preemption", "preemption.py", check.sizes.preemption, 240,
                   (r"^preemption", r"victims stopped", r"submit -> urgent running"))
    finally:
        check.finish()
    print(f"figures: {args.out / 'gpu_check.md'}")


if __name__ == "__main__":
    main()

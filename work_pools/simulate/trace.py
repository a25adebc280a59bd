"""Job traces: yoloq's documented CSV and the Tiresias CSV.

yoloq CSV (header required; `class` optional):

    job_id,team,tier,submit_time,gpus,gpu_mem_gb,duration_s,epochs,model[,class]

`submit_time` and `duration_s` in seconds; `duration_s` is the run time on a
speed-1.0 GPU (a V100) and shrinks by the GPU's `speed`; `gpu_mem_gb` is per
GPU; `tier` is urgent|high|normal|low; `class` is short|full, by default short
when `duration_s` <= 3600.

Tiresias CSV (as in the Tiresias simulator's traces):

    job_id,num_gpu,submit_time,iterations,model_name,duration,interval

read as team "default", tier normal, memory from the model name (table
below, 8 GB otherwise), epochs = iterations / 1000 (1-200); `interval` is ignored.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoloq.base.errors import UserError
from yoloq.domain.tiers import Tier

COLUMNS = ("job_id", "team", "tier", "submit_time", "gpus", "gpu_mem_gb", "duration_s", "epochs",
           "model")
TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration",
                    "interval")
SHORT_MAX_S = 3600.0
TIRESIAS_MEM_GB = {"alexnet": 6.0, "googlenet": 8.0, "inception3": 10.0, "inception4": 12.0,
                   "resnet50": 12.0, "resnet101": 14.0, "vgg16": 14.0, "vgg19": 15.0,
                   "bert": 16.0, "transformer": 12.0}


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    team: str
    tier: Tier
    submit_time: float
    gpus: int
    gpu_mem_gb: float
    duration_s: float
    epochs: int
    model: str
    job_class: str = ""

    @property
    def klass(self) -> str:
        return self.job_class or ("short" if self.duration_s <= SHORT_MAX_S else "full")


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read either format (told apart by the header), sorted by submit time."""
    path = Path(path)
    if not path.is_file():
        raise UserError("trace", f"file not found: {path}", "give a CSV trace or use --generate")
    header, rows = _read_rows(path)
    if not header:
        raise UserError("trace", f"{path} is empty", f"write a header {','.join(COLUMNS)} and rows")
    if set(COLUMNS) <= set(header):
        parse = _yoloq_row
    elif set(TIRESIAS_COLUMNS[:-1]) <= set(header):
        parse = _tiresias_row
    else:
        raise UserError("trace", f"unknown CSV header {','.join(header)}",
                        f"use {','.join(COLUMNS)} or the Tiresias columns")
    jobs = []
    seen: dict[str, int] = {}
    for line, row in enumerate(rows, start=2):
        try:
            job = parse(row)
            _check(job)
        except (KeyError, ValueError, TypeError) as exc:
            raise UserError("trace", f"line {line}: {exc}", "fix the value in that row") from None
        if job.job_id in seen:
            raise UserError("trace", f"line {line}: duplicate job_id {job.job_id!r} (first on line "
                            f"{seen[job.job_id]})", "give every job its own job_id")
        seen[job.job_id] = line
        jobs.append(job)
    if not jobs:
        raise UserError("trace", f"{path} has a header but no jobs", "add at least one row")
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def _read_rows(path: Path) -> tuple[tuple[str, ...], list[dict[str, str]]]:
    """Header and rows; a file that is not UTF-8 text is one clear error."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = tuple(h.strip() for h in (reader.fieldnames or ()) if h is not None)
            rows = [{k.strip(): (v or "").strip() for k, v in row.items()
                     if isinstance(k, str) and k and isinstance(v, str)} for row in reader]
    except UnicodeDecodeError:
        raise UserError("trace", f"{path} is not a UTF-8 CSV file",
                        "give a CSV trace (text) or use --generate") from None
    except (csv.Error, OSError) as exc:
        raise UserError("trace", f"cannot read {path}: {exc}", "give a CSV trace") from None
    if "\x00" in "".join(header):
        raise UserError("trace", f"{path} is not a CSV file (binary data)",
                        "give a CSV trace (text) or use --generate")
    return header, rows


MAX_TRACE_S = 10 * 365 * 86400.0  # beyond this a replay would step segments for ever


def unfit_jobs(jobs: "list[TraceJob]", gpus: "tuple[Any, ...]") -> list[str]:
    """Why each job that no node of the cluster could ever run would wait for ever."""
    per_node: dict[str, int] = {}
    for gpu in gpus:
        per_node[gpu.node] = per_node.get(gpu.node, 0) + 1
    most, largest = max(per_node.values(), default=0), max((g.mem_total_gb for g in gpus), default=0.0)
    found = []
    for job in jobs:
        if job.gpus > most:
            found.append(f"job {job.job_id} needs {job.gpus} GPUs; the largest node has {most}")
        elif job.gpu_mem_gb > largest:
            found.append(f"job {job.job_id} needs {job.gpu_mem_gb:g} GB; the largest GPU has {largest:g} GB")
    return found


def _check(job: "TraceJob") -> None:
    """Values a replay cannot run with: raise ValueError naming the column."""
    if not job.job_id:
        raise ValueError("job_id is empty")
    for name in ("submit_time", "duration_s", "gpu_mem_gb"):
        value = getattr(job, name)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, not {value}")
    if job.submit_time < 0:
        raise ValueError(f"submit_time must be >= 0, not {job.submit_time}")
    if job.duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, not {job.duration_s}")
    for name in ("submit_time", "duration_s"):
        if getattr(job, name) > MAX_TRACE_S:
            raise ValueError(f"{name} must be at most {MAX_TRACE_S:.0f} s (10 years), "
                             f"not {getattr(job, name):g}")
    if job.gpus < 1:
        raise ValueError(f"gpus must be at least 1, not {job.gpus}")
    if job.gpu_mem_gb < 0:
        raise ValueError(f"gpu_mem_gb must be >= 0, not {job.gpu_mem_gb}")


def _yoloq_row(row: dict[str, str]) -> TraceJob:
    klass = row.get("class", "")
    if klass not in ("", "short", "full"):
        raise ValueError(f"class must be short or full, not {klass!r}")
    return TraceJob(row["job_id"], row["team"], Tier.parse(row["tier"]), float(row["submit_time"]),
                    int(row["gpus"]), float(row["gpu_mem_gb"]), float(row["duration_s"]),
                    max(1, int(row["epochs"])), row["model"], klass)


def _tiresias_row(row: dict[str, str]) -> TraceJob:
    model = row["model_name"]
    mem = TIRESIAS_MEM_GB.get(model.lower(), 8.0)
    epochs = min(200, max(1, int(float(row["iterations"] or 0)) // 1000))
    return TraceJob(row["job_id"], "default", Tier.NORMAL, float(row["submit_time"]),
                    int(row["num_gpu"]), mem, float(row["duration"]), epochs, model)


def write_trace(path: str | Path, jobs: list[TraceJob]) -> None:
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError("--generate", f"folder {path.parent} does not exist",
                        "create it first or write the trace elsewhere")
    if path.is_dir():
        raise UserError("--generate", f"{path} is a folder", "give a file name, e.g. trace.csv")
    try:
        fh = path.open("w", newline="")
    except OSError as exc:
        raise UserError("--generate", f"cannot write {path}: {exc.strerror}",
                        "choose a writable path") from None
    with fh:
        writer = csv.writer(fh)
        writer.writerow((*COLUMNS, "class"))
        for j in jobs:
            writer.writerow((j.job_id, j.team, j.tier.label, f"{j.submit_time:.1f}", j.gpus,
                             f"{j.gpu_mem_gb:.1f}", f"{j.duration_s:.1f}", j.epochs, j.model,
                             j.klass))

"""Run one YOLO-NAS segment: `runner.py` in the engine's own environment, as a child process.

The segment contract is the other engines': epochs [done, stop_after_epoch) of the job's
full schedule (the runner's LR schedule and warmup span `spec.epochs`), a checkpoint after
every epoch, resumed bit-identically from the previous segment's file, stopped at an epoch
boundary when the hooks ask. The child speaks JSON lines on stdout (`runner.py`'s doc);
with `handshake` on, after every epoch short of the target it waits for this process's
answer to `hooks.should_stop`, so a preemption lands at the very next boundary. Its stderr
(super-gradients' own log) goes to `runner.log` in the workdir; a failure raises with the
runner's one-line message and the log's last lines.

Metrics reach the hooks under ultralytics' detection names (`metrics/mAP50-95(B)`, ...),
so a YOLO-NAS job and a YOLOv8 job on one dataset compare in MLflow; the losses keep
super-gradients' names (`train/loss_iou`, ...).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoloq.analysis.families import NAS_TRAIN_ARGS
from yoloq.analysis.train_args import yolonas_problem
from yoloq.base.errors import UserError
from yoloq.engine.environments import engine_env, require
from yoloq.engine.segment import NoHooks, SegmentRequest, SegmentResult

RUNNER = Path(__file__).resolve().with_name("runner.py")
# the runner's val metrics -> ultralytics' detection names (as `results.csv` spells them)
_METRIC_NAMES = {"val/mAP50": "metrics/mAP50(B)", "val/mAP50-95": "metrics/mAP50-95(B)",
                 "val/precision50": "metrics/precision(B)", "val/recall50": "metrics/recall(B)"}
KEEP_CHECKPOINTS = 2  # the runner deletes this segment's older epoch files (about 250 MB each for yolo_nas_s)


class RunnerFailed(RuntimeError):
    """The YOLO-NAS runner ended with an error (its message, then its log's tail)."""


@dataclass
class _Outcome:
    epochs_done: int = 0
    finished: bool = False
    stopped: bool = False
    best: str | None = None
    last_checkpoint: Path | None = None
    error: str = ""


def runner_request(request: SegmentRequest) -> dict[str, Any]:
    """The runner's request for a segment (`runner.py` refuses unknown fields)."""
    spec = request.spec
    arch, weights = spec.model.strip().lower(), None
    if spec.model.lower().endswith(".pt"):  # fine-tuning from a finished YOLO-NAS job's weights
        from yoloq.analysis.fingerprint import fingerprint

        arch, weights = fingerprint(spec.model).model_yaml, str(Path(spec.model).resolve())
    fields: dict[str, Any] = {
        "arch": arch, "weights": weights, "data": str(Path(spec.data).expanduser().resolve()),
        "epochs": spec.epochs, "stop_after_epoch": request.stop_after_epoch, "imgsz": spec.imgsz,
        "batch": spec.batch, "workdir": str(Path(request.workdir).resolve()), "handshake": True,
        "resume_from": str(Path(request.resume_from).resolve()) if request.resume_from else None,
        "device": "cpu" if str(request.device) == "cpu" else "cuda", "keep_checkpoints": KEEP_CHECKPOINTS,
    }
    problem = yolonas_problem(spec.train_args)
    if problem:
        raise UserError(*problem)
    fields.update({NAS_TRAIN_ARGS[k]: v for k, v in spec.train_args.items() if NAS_TRAIN_ARGS.get(k)})
    return fields


def run_segment(request: SegmentRequest, hooks: Any = None) -> SegmentResult:
    """Train one YOLO-NAS segment in the engine's environment and return where its outputs are."""
    hooks = hooks or NoHooks()
    python = require("yolo-nas")
    workdir = Path(request.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    request_file = workdir / "request.json"
    request_file.write_text(json.dumps(runner_request(request), indent=1))
    with open(workdir / "runner.log", "ab") as log:
        child = subprocess.Popen([str(python), str(RUNNER), "--request", str(request_file)], cwd=workdir,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                 env=engine_env(), bufsize=1)
        try:
            outcome = _follow(child, request, hooks)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
    if outcome.error or child.returncode != 0:
        raise RunnerFailed(f"YOLO-NAS runner: {outcome.error or f'exit {child.returncode}'}; "
                           f"log tail: {_tail(workdir / 'runner.log')}")
    last = outcome.last_checkpoint or Path(request.resume_from or workdir / "none")
    if outcome.finished:
        hooks.on_checkpoint(outcome.epochs_done, last)
    return SegmentResult(epochs_done=outcome.epochs_done, finished=outcome.finished,
                         stopped_early=outcome.stopped, checkpoint=last,
                         best=Path(outcome.best) if outcome.finished and outcome.best else (last if outcome.finished else None),
                         save_dir=workdir)


def _follow(child: subprocess.Popen, request: SegmentRequest, hooks: Any) -> _Outcome:
    """Read the runner's events, feeding the hooks and answering its handshakes."""
    outcome = _Outcome()
    uploads = _Uploads(hooks, request)
    start = getattr(hooks, "on_epoch_start", None)
    for line in child.stdout:  # type: ignore[union-attr]
        event = json.loads(line)
        kind = event.get("event")
        if kind == "start":
            outcome.epochs_done = int(event["epoch"])
            if start is not None:
                start(outcome.epochs_done + 1)
        elif kind == "epoch_end":
            epoch = int(event["epoch"])
            outcome.epochs_done, outcome.last_checkpoint = epoch, Path(event["checkpoint"])
            hooks.on_epoch_end(epoch, nas_metrics(event.get("metrics") or {}))
            if epoch >= request.spec.epochs:
                continue  # the finishing checkpoint is reported after `done`
            at_target = epoch >= request.stop_after_epoch
            stop = at_target or bool(hooks.should_stop(epoch))
            if stop or uploads.due(epoch):
                uploads.upload(epoch, outcome.last_checkpoint, float(event.get("seconds") or 0.0))
            if not at_target:
                child.stdin.write("stop\n" if stop else "go\n")  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
                if not stop and start is not None:
                    start(epoch + 1)
        elif kind == "stopped":
            outcome.stopped = True
        elif kind == "done":
            outcome.epochs_done, outcome.finished = int(event["epochs_done"]), bool(event["finished"])
            outcome.best = event.get("best")
        elif kind == "error":
            outcome.error = str(event.get("message"))
    return outcome


class _Uploads:
    """When a checkpoint goes to the store (`hooks.on_checkpoint`): at the stopping boundary,
    and every `checkpoint_every` epochs, by cost when None (as the ultralytics engine does:
    the first upload's time against the epoch's, `work_pools.policy.checkpoints`)."""

    def __init__(self, hooks: Any, request: SegmentRequest) -> None:
        self.hooks, self.request, self.every = hooks, request, request.checkpoint_every

    def due(self, epoch: int) -> bool:
        return self.every is None or epoch % self.every == 0

    def upload(self, epoch: int, path: Path, epoch_s: float) -> None:
        started = time.monotonic()
        self.hooks.on_checkpoint(epoch, path)
        if self.every is None:
            from work_pools.policy.checkpoints import checkpoint_interval

            plan = checkpoint_interval(max(epoch_s, 1e-3), time.monotonic() - started,
                                       max_loss_s=self.request.max_crash_loss_s)
            self.every = plan.every_epochs


def nas_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The runner's epoch metrics under the names detection jobs log."""
    return {_METRIC_NAMES.get(name, name): float(value) for name, value in metrics.items()}


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:])[-800:] or "(empty)"


def run_tool(args: list[str], workdir: Path) -> list[dict[str, Any]]:
    """`runner.py --evaluate|--export ...` in the engine's environment: its JSON events."""
    python = require("yolo-nas")
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "runner.log", "ab") as log:
        done = subprocess.run([str(python), str(RUNNER), *args], cwd=workdir, stdout=subprocess.PIPE,
                              stderr=log, text=True, env=engine_env())
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    errors = [e for e in events if e.get("event") == "error"]
    if done.returncode != 0 or errors:
        message = errors[0].get("message") if errors else f"exit {done.returncode}"
        raise RunnerFailed(f"YOLO-NAS runner {args[0]}: {message}; log tail: {_tail(workdir / 'runner.log')}")
    return events

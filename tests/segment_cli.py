"""Run one segment as its own process: `python tests/segment_cli.py ...` (a test and bench helper).

Prints progress like ultralytics; writes the SegmentResult and the per-epoch
metrics as JSON to `--result` (for a worker or a test that started the process).
Exit code 0 on success, 2 on a user error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from yoloq.engine.dispatch import run_segment
from yoloq.engine.segment import CHECKPOINT_EVERY_ENV, SegmentRequest
from yoloq.base.errors import UserError
from yoloq.domain.spec import load_spec


@dataclass
class RecordingHooks:
    """Records what a segment reported; optionally asks to stop after a given epoch."""

    stop_at: int | None = None
    keep: Path | None = None  # copy each reported checkpoint here as epoch<N>.pt
    epochs: list[dict] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> None:
        self.epochs.append({"epoch": epoch, "metrics": metrics})

    def on_checkpoint(self, epoch: int, path: Path) -> None:
        self.checkpoints.append(epoch)
        if self.keep is not None:
            self.keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, self.keep / f"epoch{epoch}.pt")

    def should_stop(self, epoch: int) -> bool:
        return self.stop_at is not None and epoch >= self.stop_at


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tests/segment_cli.py",
                                     description="Train one resumable segment of a job.")
    parser.add_argument("--spec", required=True, type=Path, help="job spec (YAML or JSON)")
    parser.add_argument("--workdir", required=True, type=Path, help="scratch folder (save_dir)")
    parser.add_argument("--stop-after", required=True, type=int,
                        help="train until this many epochs are done in total")
    parser.add_argument("--resume-from", type=Path, help="checkpoint of the previous segment")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--stop-at", type=int, help="ask to stop after this epoch (preemption test)")
    parser.add_argument("--result", type=Path, help="write the result and metrics here as JSON")
    parser.add_argument("--checkpoint-every", help="report a checkpoint every N epochs besides "
                        "the stopping boundary, or auto (by measured cost)")
    parser.add_argument("--keep", type=Path, help="copy each reported checkpoint into this folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    hooks = RecordingHooks(stop_at=args.stop_at, keep=args.keep)
    try:
        if args.checkpoint_every is not None:
            os.environ[CHECKPOINT_EVERY_ENV] = args.checkpoint_every
        request = SegmentRequest(spec=load_spec(args.spec), workdir=args.workdir,
                                 stop_after_epoch=args.stop_after, resume_from=args.resume_from,
                                 device=args.device)
        result = run_segment(request, hooks)
    except UserError as exc:
        print(f"error: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    if args.result:
        payload = {"result": {k: str(v) if isinstance(v, Path) else v
                              for k, v in asdict(result).items()},
                   "epochs": hooks.epochs, "checkpoints": hooks.checkpoints}
        args.result.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`yoloq analyse SPEC [--json] [--gpu NAME]`: validate, fingerprint, estimate, classify."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="job spec file (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--gpu", help="GPU type for memory, max batch and time (default: the reference, "
                        "V100-32GB): a name from yoloq/domain/gpus.py, e.g. A100-80GB, T4, CPU")


def run(args: argparse.Namespace) -> int:
    from yoloq.analysis import analyse_file

    analysis = analyse_file(args.spec, gpu=args.gpu)
    if args.json:
        print(json.dumps(analysis.to_dict(), indent=2))
    else:
        print(summary(analysis.to_dict()))
    return 0


def summary(a: dict) -> str:
    """A short human summary of an analysis dict."""
    names = ", ".join(a["names"][:8]) + (", ..." if len(a["names"]) > 8 else "")
    lines = [
        f"job {a['name']} (team {a['team']}): {a['job_class']} job, queue {a['queue']}",
        f"model    {a['model']}: {a['family']} scale {a['scale']}, {a['task']}, "
        f"{a['params_m']:.1f}M params, {a['gflops']:.1f} GFLOPs@640",
        f"data     {a['nc']} classes ({names}); {a['train_images']} train / {a['val_images']} val images",
        f"train    {a['epochs']} epochs at {a['imgsz']}px, batch {a['batch']}"
        f"{'' if a['amp'] else ', no AMP'}; {a['segment_epochs']} epochs per segment",
        f"on {a['gpu']}: ~{a['est_gpu_mem_gb']:.1f} GB, max batch {a['max_batch']}, "
        f"~{_duration(a['est_epoch_s'])} per epoch, ~{_duration(a['est_duration_s'])} in all",
        f"resume   {'bit-exact' if a['exact_resume'] else 'not bit-exact'}",
    ]
    if a.get("trains_from_scratch"):
        lines.append("weights  none: trains from scratch (random initialisation); to fine-tune, give a local "
                     ".pt as `model` or `train_args.pretrained`")
    elif a.get("weights") and not a.get("fingerprint"):
        lines.append(f"weights  starts from {a['weights']}")
    fp = a.get("fingerprint")
    if fp:
        lines.append(f"weights  {fp['label']}, {fp['family']}{fp['scale']} {fp['task']}, "
                     f"ultralytics {fp['ultralytics_version']}")
    lines += [f"warning  {w}" for w in a["warnings"]]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"

"""`yoloq analyse SPEC [--json] [--gpu NAME]`: the admission verdict `yoloq submit` would give,
without queueing anything.

The same path as `submit`, stopped before a run is created: the spec (or sweep file) is read by
the same planner, and `yoloq.service.admission.admit` decides: the analysis (validate,
fingerprint, estimate, classify), then the team's tier cap and the fit on the pool. Where the
verdict is made follows `submit` too: the configured yoloq server (`yoloq login`), else for one
job without --gpu this host's stack API, else this process against this host's stack. With no
stack answering here, the tier cap is not checked and the fit only against a --gpu type given;
the notes say so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from yoloq.commands._client import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="job spec file (YAML or JSON), or a sweep file")
    parser.add_argument("--json", action="store_true", help="one JSON object on one line (a sweep: one per job)")
    parser.add_argument("--gpu", help="GPU type for memory, max batch and time (default: the reference, "
                        "V100-32GB): a name from yoloq/domain/gpus.py, e.g. A100-80GB, T4, CPU; the fit "
                        "is checked against it while the pool has no live node (as `submit --gpu`)")


def run(args: argparse.Namespace) -> int:
    from yoloq.domain import sweep
    from yoloq.service.submission import Job, stop_if_bad

    jobs = [Job(p.source, spec=p.spec, error=p.error, point=p.point) for p in sweep.plan([args.spec], [])]
    single = len(jobs) == 1
    stop_if_bad(jobs, keep_going=False, single=single)
    outcomes = _verdicts(jobs, args.gpu)
    notes = list(dict.fromkeys(n for _, admission in outcomes for n in admission["notes"]))
    for analysis, admission in outcomes:
        if args.json:
            print_json({**analysis, "admission": admission})  # one line per job
        else:
            print(summary(analysis) + _fit_line(admission.get("fit")))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _verdicts(jobs: list[Any], gpu: str | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(analysis, admission) per job, decided where `submit` would decide; the first refusal raises."""
    from yoloq.client.remote import remote
    from yoloq.commands._client import local_api

    server = remote()
    if server is None and gpu is None and len(jobs) == 1:
        server = local_api()
    if server is not None:
        if gpu:
            print(f"note: --gpu {gpu} is not used: the server checks the fit against its live nodes",
                  file=sys.stderr)
        with server:
            answers = [server.post("/analyse", job.spec.model_dump(mode="json")) for job in jobs]
        return [(a["analysis"], {k: v for k, v in a.items() if k != "analysis"}) for a in answers]
    return [(v.analysis.to_dict(), v.to_dict()) for v in _local_verdicts(jobs, gpu)]


def _local_verdicts(jobs: list[Any], gpu: str | None) -> list[Any]:
    """In this process: against this host's stack when one answers, else against no pool."""
    from yoloq.service.admission import pool_context, unseen_pool
    from yoloq.service.connection import stack_answers_here, stack_client
    from yoloq.service.submission import admit_on_pool, analyse_job, stop_if_bad

    for job in jobs:
        analyse_job(job, gpu)
    stop_if_bad(jobs, keep_going=False, single=len(jobs) == 1)
    if stack_answers_here():
        with stack_client() as client:
            pool = pool_context(client, gpu)
    else:
        pool = unseen_pool(gpu)
    for job in jobs:
        admit_on_pool(job, gpu, pool)
    stop_if_bad(jobs, keep_going=False, single=len(jobs) == 1)
    return [job.verdict for job in jobs]


def _fit_line(fit: dict[str, Any] | None) -> str:
    if not fit:
        return ""
    reduced = " (reduced to fit: not exact resume)" if fit.get("reduced") else ""
    return f"\npool     fits {fit['gpu']} on node {fit['node']} at batch {fit['batch']}{reduced} ({fit['source']})"


def _classes(a: dict, names: str) -> str:
    if a["task"] == "depth":
        return "depth maps"
    return f"{a['nc']} class{'' if a['nc'] == 1 else 'es'} ({names})"


def summary(a: dict) -> str:
    """A short human summary of an analysis dict."""
    names = ", ".join(a["names"][:8]) + (", ..." if len(a["names"]) > 8 else "")
    lines = [
        f"job {a['name']} (team {a['team']}): {a['job_class']} job, queue {a['queue']}",
        f"model    {a['model']}: {a['family']} scale {a['scale']}, {a['task']}, "
        f"{a['params_m']:.1f}M params, {a['gflops']:.1f} GFLOPs@640",
        f"data     {_classes(a, names)}; {a['train_images']} train / {a['val_images']} val images",
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

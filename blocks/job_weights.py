"""`model: job:<id>[:best|:last]`: fine-tune from a finished job's weights, on any node.

The weights come from the job's finished checkpoint in the checkpoint store (a folder or S3),
downloaded into this node's state folder with the sha256 the store recorded verified, and
written as a plain ultralytics `.pt` (best.pt as the job's evaluation chose it, or the last
epoch's EMA weights). The spec keeps the reference; each node resolves it for itself, and the
analysis fingerprints the file as it does any `.pt`. Unknown and unfinished jobs are one-line
errors naming the job.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from yoloq.base.errors import UserError
from yoloq.domain.contract import JOB_WEIGHTS_PREFIX
from yoloq.domain.spec import JobSpec, JobWeightsRef, parse_job_ref


def resolve_model(spec: JobSpec, store: Any = None, root: str | os.PathLike[str] | None = None) -> JobSpec:
    """`spec` with a `job:` model replaced by the local weights file (unchanged otherwise)."""
    ref = parse_job_ref(spec.model)
    if ref is None:
        return spec
    return spec.model_copy(update={"model": str(job_weights(ref, store, root))})


def job_weights(ref: JobWeightsRef, store: Any = None, root: str | os.PathLike[str] | None = None) -> Path:
    """The referenced job's weights as a local `.pt` (downloaded once per checkpoint)."""
    from blocks import stores
    from yoloq.base.paths import state_paths

    store = store or stores.checkpoint_store()
    try:
        latest = store.latest(ref.job_id)
    except ValueError:  # not a safe job id
        latest = None
    if latest is None:
        raise UserError("model", f"{JOB_WEIGHTS_PREFIX}{ref.job_id}: no job of that id has weights in the checkpoint store",
                        "name a finished job (`yoloq status` lists them)")
    if not latest.finished:
        raise UserError("model", f"{JOB_WEIGHTS_PREFIX}{ref.job_id} has not finished (its newest checkpoint is epoch "
                        f"{latest.epoch})", "wait until it completes (`yoloq status`), then submit again")
    dest = state_paths(root).root / "job-weights" / ref.job_id / f"e{latest.epoch}-{latest.sha256[:12]}-{ref.which}.pt"
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        restored = store.restore(ref.job_id, Path(tmp) / "restore")
        if restored is None or restored.info.sha256 != latest.sha256:
            raise UserError("model", f"{JOB_WEIGHTS_PREFIX}{ref.job_id}: its finished checkpoint (epoch {latest.epoch}) did "
                            "not verify against the sha256 the store recorded",
                            "check the checkpoint store (docs/operations/runbook.md)")
        written = Path(tmp) / dest.name
        _write_weights(restored.path, written, ref.which)
        os.replace(written, dest)
    return dest


def _write_weights(checkpoint: Path, dest: Path, which: str) -> None:
    """best.pt from a finished checkpoint, or its last epoch's weights, stripped as ultralytics strips them."""
    from yoloq.engine.checkpoint import KEY, finished_best, serialize

    if which == "best":
        finished_best(checkpoint, dest)
        return
    import torch
    from ultralytics.utils.torch_utils import strip_optimizer

    loaded = torch.load(checkpoint, map_location="cpu", weights_only=False)
    dest.write_bytes(serialize({k: v for k, v in loaded.items() if k != KEY}))
    strip_optimizer(dest)

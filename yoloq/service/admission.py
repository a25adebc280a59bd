"""Admission: the one verdict on a job spec, shown by `yoloq analyse`, `yoloq submit` (local,
remote, one job or a batch) and `POST /v1/jobs` alike.

`admit(spec, gpu, pool)` decides, in this order: the analysis (spec, model, dataset, train
arguments, estimates), the team's tier cap, and the fit on the pool's GPUs. The first refusal
wins; what could not be checked is said in the verdict's notes. `analyse` stops there;
`submit` creates the run of an accepted job (`yoloq.service.submission`).

The pool is what `pool_context` reads from a running stack (the policy in force and every live
node's GPUs). Where no live node exists yet, the `--gpu` type given stands in for the pool;
where no stack answers at all (`unseen_pool`: `analyse` with nothing running), the tier cap is
not checked and the fit only against a `--gpu` type given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from yoloq.analysis.fit import PoolGpu
from yoloq.base.errors import UserError

NO_LIVE_NODE_NOTE = "fit not checked: the pool has no live node yet (give --gpu NAME to check against a type)"
NO_STACK_NOTE = ("tier cap not checked: no stack answers here (`yoloq submit` checks it against "
                 "the policy in force)")
NO_STACK_FIT_NOTE = ("fit not checked: no stack answers here, so no live node is known "
                     "(give --gpu NAME to check against a type)")

SPEC, TIER_CAP, FIT = "spec", "tier cap", "fit"  # what refused a job (`Verdict.refused_by`)


class TierCapError(UserError):
    """A tier above the team's cap (the API answers 403)."""


@dataclass(frozen=True)
class PoolContext:
    """What a job is checked against beyond its own spec."""

    policy: Any  # work_pools.policy.model.Policy in force; None: no stack answered (cap not checked)
    gpus: tuple[PoolGpu, ...]  # the live nodes' GPUs, else the --gpu type, else none
    source: str  # "live nodes" | "--gpu" | "none"

    @property
    def stack_seen(self) -> bool:
        return self.policy is not None


@dataclass(frozen=True)
class Verdict:
    """Accepted (maybe with warnings and notes) or refused with one field/problem/fix."""

    analysis: Any  # yoloq.analysis.Analysis; None when the analysis itself refused the spec
    refusal: UserError | None = None
    refused_by: str = ""  # SPEC | TIER_CAP | FIT when refused
    fit: dict[str, Any] | None = None  # where it fits: source, node, gpu, batch, reduced
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def accepted(self) -> bool:
        return self.refusal is None

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self.analysis.warnings) if self.analysis is not None else ()

    def to_dict(self) -> dict[str, Any]:
        """What `analyse --json` and `POST /v1/analyse` add beside the analysis."""
        return {"accepted": self.accepted, "refused_by": self.refused_by or None,
                "error": _error_dict(self.refusal) if self.refusal else None,
                "fit": self.fit, "notes": list(self.notes)}


def admit(spec: Any, gpu: str | None, pool: PoolContext | None, analysis: Any = None,
          validate: Callable[..., Any] | None = None) -> Verdict:
    """The verdict on `spec` (a JobSpec) against `pool`; the one function that decides admission.

    `pool` None gives the analysis's verdict alone (a batch analyses every job before it reads
    the pool, then calls again with the pool and the `analysis` already made). `validate` is
    the dataset check (default `yoloq.datasets.validate.validate_dataset`; a bulk submit passes
    one that reads each dataset once per request, `yoloq.service.bulk`)."""
    if analysis is None:
        from blocks.job_weights import resolve_model
        from yoloq.analysis import analyse
        from yoloq.datasets.validate import validate_dataset

        try:
            analysis = analyse(resolve_model(spec), gpu=gpu, validate=validate or validate_dataset)  # bad input stops here: no run created, no GPU time
            require_engine(analysis)
        except UserError as exc:
            return Verdict(None, exc, SPEC)
    if pool is None:
        return Verdict(analysis)
    notes: list[str] = []
    if pool.policy is None:
        notes.append(NO_STACK_NOTE)
    else:
        try:
            check_tier_cap(spec, pool.policy)
        except UserError as exc:
            return Verdict(analysis, exc, TIER_CAP, notes=tuple(notes))
    try:
        fit = fit_on_pool(analysis, pool, notes)
    except UserError as exc:
        return Verdict(analysis, exc, FIT, notes=tuple(notes))
    return Verdict(analysis, fit=fit, notes=tuple(notes))


def require_engine(analysis: Any) -> None:
    """An engine with its own environment (YOLO-NAS) must be installed on this host: its
    jobs are refused here, naming the install command, rather than failing on a GPU.
    (A cluster installs it on every node and on the host that admits.)"""
    from yoloq.analysis.families import YOLO_NAS

    if analysis.family == YOLO_NAS:
        from yoloq.engine.environments import require

        require(YOLO_NAS)


def _error_dict(exc: UserError) -> dict[str, Any]:
    return {"field": exc.field, "problem": exc.problem, "fix": exc.fix, "message": exc.line()}


def check_tier_cap(spec: Any, policy: Any) -> None:
    """The team may not use a tier above its cap (submit, retier): a one-line refusal."""
    from work_pools.policy.rules import check_tier_allowed

    refusal = check_tier_allowed(spec.team, spec.tier, policy)
    if refusal:
        cap = policy.tier_caps.get(spec.team, policy.default_tier_cap)
        raise TierCapError("priority", refusal, f"use priority: {cap.label}")


def fit_on_pool(analysis: Any, pool: PoolContext, notes: list[str]) -> dict[str, Any] | None:
    """Where the analysed job fits in the pool; raise when it fits no GPU of it."""
    from yoloq.analysis.fit import check_fit

    if not pool.gpus:
        notes.append(NO_LIVE_NODE_NOTE if pool.stack_seen else NO_STACK_FIT_NOTE)
        return None
    policy = pool.policy if pool.policy is not None else _default_policy()
    smallest = max(1, policy.min_reduced_batch) if policy.allow_reduced_batch else analysis.batch
    verdict = check_fit(analysis, list(pool.gpus), smallest)
    if verdict.refusal is not None:
        raise verdict.refusal
    if verdict.reduced:
        notes.append(f"{analysis.name}: batch {analysis.batch} fits no GPU of the pool; it can run with a "
                     f"reduced batch of {verdict.batch} on {verdict.gpu.name} (node {verdict.gpu.node}), "
                     "which is not exact resume")
    return {"source": pool.source, "node": verdict.gpu.node, "gpu": verdict.gpu.name, "batch": verdict.batch,
            "reduced": verdict.reduced}


def pool_context(client: Any, gpu: str | None) -> PoolContext:
    """The policy in force and the pool's GPUs, read from the stack `client` talks to (the
    caller's `stack_client()` has pointed Prefect at it)."""
    from blocks.policy import load_policy

    live = tuple(PoolGpu(node.name, info.name, info.mem_total_gb) for node in live_nodes(client)
                 for info in node.gpus)
    if live:
        return PoolContext(load_policy(), live, "live nodes")
    return PoolContext(load_policy(), _gpu_type(gpu), "--gpu" if _gpu_type(gpu) else "none")


def unseen_pool(gpu: str | None) -> PoolContext:
    """No stack answers: no policy, and the --gpu type (if any) stands in for the pool."""
    kind = _gpu_type(gpu)
    return PoolContext(None, kind, "--gpu" if kind else "none")


def live_nodes(client: Any) -> list[Any]:
    """The GPU pool's live node records, read through this sync client (as `work_pools.nodes.read_nodes`
    does through an async one: a new client per call costs more than the read)."""
    from work_pools.nodes import read_nodes_sync
    from yoloq.base.names import GPU_POOL

    now = time.time()
    return [r for r in read_nodes_sync(client, GPU_POOL) if r.alive(now)]


def _gpu_type(gpu: str | None) -> tuple[PoolGpu, ...]:
    """The --gpu type as a one-GPU pool; none for no name or an unknown one (the analysis refuses
    an unknown name with its own line, before the pool is looked at)."""
    if not gpu:
        return ()
    from yoloq.domain import gpus

    try:
        kind = gpus.lookup(gpu)
    except gpus.UnknownGpu:
        return ()
    return (PoolGpu("--gpu", kind.name, kind.mem_gb),)


def _default_policy() -> Any:
    from work_pools.policy.model import Policy

    return Policy()

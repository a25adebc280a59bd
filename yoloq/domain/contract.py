"""The segment contract: what travels between a job's parent, the scheduler and its segments.

Three parts, one module, so every producer and consumer reads the same definitions:

- `SegmentPlan`: the plan a parent writes into each segment run's parameters (`plan`) and an
  urgent submit announces in a label of its parent run. Frozen, typed and versioned.
- The names yoloq writes on Prefect: flow-run labels, run tags (`job:<id>`, `team:<t>`,
  `tier:<t>`, `yoloq`), event names and resources, and the tags of the job's MLflow run.
  No other module spells one of them (`tests/test_contract.py` scans the source).
- Outcome helpers over a segment run or a job's runs: `was_preempted`, `preemption_count`,
  `progress_epoch`, `start_epoch`, `final_state`. One definition of "preempted": a segment
  that ended `Preempted` (it stopped at an epoch boundary), or a victim that ended `Crashed`
  while its preemption was requested (killed after overstaying its grace, or lost while
  stopping). Both cost the job its slot and resume it from its last checkpoint.

Wire format and versions. Version 1 is the plan's shape as yoloq has always written it: a JSON
object with the fields of `SegmentPlan`. Runs already in a database carry it without a
`version` key, so a plan without one is read as version 1; `to_dict()` writes `"version": 1`
(older readers ignore the extra key). Any other version is refused with one line naming the
version found and the ones this yoloq reads (`PlanError`): a newer node's plan is never half
understood. Unknown keys are ignored (a version-1 plan may carry fields a later yoloq adds
without changing their meaning; a change of meaning is a new version).

Nothing here imports Prefect: runs are read through their attributes (`state`, `labels`,
`parameters`), so the helpers work on Prefect's FlowRun and on plain test objects alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# ----------------------------------------------------------------- labels on Prefect flow runs
# On a segment run, written by the scheduler (pool leader) and the node agent:
PREEMPT_LABEL = "yoloq.preempt"  # "requested": stop at the next epoch boundary
PREEMPT_REQUESTED = "requested"  # the value of PREEMPT_LABEL on a victim
PREEMPTED_BY_LABEL = "yoloq.preempted_by"  # the job the victim was asked to stop for
PREEMPT_REASON_LABEL = "yoloq.preempt_reason"  # why, in words (at most 200 characters)
PREEMPT_ASKED_AT_LABEL = "yoloq.preempt_asked_at"  # when (epoch seconds): the grace starts here
THROTTLE_LABEL = "yoloq.throttle"  # soft preemption: the victim's next batch
THROTTLE_GPU_LABEL = "yoloq.throttle_gpu"  # "<node>:<local index>" it shares
ASSIGNED_AT_LABEL = "yoloq.assigned_at"  # when the leader admitted it (epoch seconds)
ADMIT_REASON_LABEL = "yoloq.admit_reason"  # why it was admitted, in words
NODE_LABEL = "yoloq.node"  # the node it was assigned to
GPUS_LABEL = "yoloq.gpus"  # its GPUs' local indices on that node, comma-separated
SPEED_LABEL = "yoloq.gpu_speed"  # relative speed of the slowest of them
GPU_NAME_LABEL = "yoloq.gpu_name"  # their model name
BATCH_LABEL = "yoloq.batch"  # a reduced batch the leader admitted it at
TIER_LABEL = "yoloq.tier"  # set by `yoloq retier`; overrides the tier the job was submitted at
EPOCHS_LABEL = "yoloq.epochs"  # set by `yoloq extend` on the parent: the job's total epochs now
# On a segment run, written by the segment itself:
EPOCH_LABEL = "yoloq.epoch"  # the last epoch checkpointed
CHECKPOINT_AT_LABEL = "yoloq.checkpoint_at"  # when (epoch seconds)
FINALISED_LABEL = "yoloq.finalised"  # the epoch a segment finalised the job at (ended its MLflow run)
# On a segment run, written by `yoloq down` (a drain, `work_pools.drain`) and the segment:
DRAIN_LABEL = "yoloq.drain"  # "requested" on a segment `down` asked to stop
DRAIN_REASON_LABEL = "yoloq.drain_reason"
DRAIN_ASKED_AT_LABEL = "yoloq.drain_asked_at"
TRAINED_LABEL = "yoloq.trained_epoch"  # epochs done in total, written at every epoch end
EPOCH_S_LABEL = "yoloq.epoch_s"  # the last epoch's duration, measured by the segment
CHECKPOINT_S_LABEL = "yoloq.checkpoint_s"  # the last checkpoint upload's duration
# On a job's parent (`yolo-job`) run:
ANNOUNCE_LABEL = "yoloq.announce"  # its first segment's plan (JSON), "" once queued
PARENT_TOKEN_LABEL = "yoloq.parent_token"  # the live parent process's token

# ----------------------------------------------------------------- tags on Prefect runs
PRODUCT_TAG = "yoloq"  # on every run yoloq creates
NODE_VARIABLE_TAG = "yoloq-node"  # on the Prefect Variable that holds a node's record


JOB_WEIGHTS_PREFIX = "job:"  # a spec's `model: job:<id>[:best|:last]` (a finished job's weights)


def job_tag(job_id: str) -> str:
    """The tag on a job's parent run and all its segment runs."""
    return f"job:{job_id}"


def team_tag(team: str) -> str:
    return f"team:{team}"


def tier_tag(tier: str) -> str:
    """The tier the job was submitted at (`yoloq retier` writes `TIER_LABEL` instead)."""
    return f"tier:{tier}"


def run_tags(job_id: str, team: str, tier: str, *extra: str) -> list[str]:
    """Every tag a job's parent and segment runs carry, in the order yoloq has written them."""
    return [job_tag(job_id), team_tag(team), tier_tag(tier), PRODUCT_TAG, *extra]


# ----------------------------------------------------------------- events (the audit log)
EVENT_PREFIX = "yoloq."  # the audit log reads the events named under it
JOB_EVENT_PREFIX = "yoloq.job."  # submitted, cancelled, preempted, tier_changed
TEAM_EVENT_PREFIX = "yoloq.team."  # quota_exceeded, quota_changed, limits_changed, ...
QUOTA_EVENT = "yoloq.team.quota_exceeded"
DATASET_UPDATED_EVENT = "dataset.updated"  # `yoloq dataset updated`; prefect.yaml's retrain trigger
DATASET_RESOURCE_PREFIX = "yoloq.dataset."  # a dataset's event resource: yoloq.dataset.<folder name>
NODE_RESOURCE_PREFIX = "yoloq.node."  # a node's event resource: yoloq.node.<name>
POLICY_CHANGED_EVENT = "yoloq.policy.changed"  # the saved scheduling policy changed
POLICY_RESOURCE = "yoloq.policy"  # its event resource id
SLOT_FREED_EVENT = "yoloq.slot.freed"  # a segment's process on a node has exited
RESOURCE_TEAM = "yoloq.team"  # the event resource's key naming the team
RESOURCE_DATASET_PATH = "yoloq.dataset.path"  # the event resource's key naming a dataset's file


def job_event(kind: str) -> str:
    return f"{JOB_EVENT_PREFIX}{kind}"


def team_event(kind: str) -> str:
    return f"{TEAM_EVENT_PREFIX}{kind}"


def job_resource_id(job_id: str) -> str:
    return f"{JOB_EVENT_PREFIX}{job_id}"


def team_resource_id(team: str) -> str:
    """A team's event resource id; `team_resource_id("*")` matches every team."""
    return f"{TEAM_EVENT_PREFIX}{team}"


def dataset_resource_id(name: str) -> str:
    """A dataset's event resource id; `dataset_resource_id("*")` matches every dataset."""
    return f"{DATASET_RESOURCE_PREFIX}{name}"


def node_resource_id(node: str) -> str:
    return f"{NODE_RESOURCE_PREFIX}{node}"


# ----------------------------------------------------------------- tags of the job's MLflow run
TAG_JOB_ID = "yoloq.job_id"
TAG_TEAM = "yoloq.team"
TAG_TIER = "yoloq.tier"
TAG_JOB_CLASS = "yoloq.job_class"
TAG_SEGMENTS = "yoloq.segments"  # counter: segments that trained
TAG_PREEMPTIONS = "yoloq.preemptions"  # counter: segments that stopped at a boundary for another job
TAG_REDUCED_BATCH = "yoloq.reduced_batch"
TAG_THROTTLED = "yoloq.throttled"
TAG_EVAL_SPLIT = "yoloq.eval_split"
TAG_EVALUATED = "yoloq.stage.evaluated"  # the epoch whose weights were evaluated
TAG_EXPORTED = "yoloq.stage.exported"  # the epoch whose weights were exported
TAG_EPOCHS = "yoloq.epochs"  # the job's total epochs now (params keep the total it was submitted with)

# ----------------------------------------------------------------- state names
PREEMPTED = "Preempted"  # the state a segment ends in when it stops for another job


# ----------------------------------------------------------------- the plan
PLAN_VERSION = 1
KNOWN_PLAN_VERSIONS = (1,)


class PlanError(ValueError):
    """A segment plan this yoloq cannot read: the message is one line naming the field."""


@dataclass(frozen=True)
class SegmentPlan:
    """What the scheduler needs to place a segment without reading anything else, and what
    the segment checks before it trains. `None` fields were not given: readers fall back to
    the job's spec (plans from before they were written)."""

    team: str | None = None
    tier: str | None = None  # the tier label as submitted ("urgent", "high", ...)
    job_class: str = "full"  # the analysis' class: "short" or "full"
    est_mem_gb: float = 0.0  # estimated peak GPU memory at `batch`
    est_epoch_s: float = 0.0  # estimated seconds per epoch on a speed-1 GPU
    epochs: int | None = None  # the job's epochs in all
    epochs_done: int = 0  # epochs the job's store holds when this segment starts
    submitted_at: float | None = None  # when the job (not this segment) was submitted
    batch: int | None = None  # the batch it trains at
    fixed_mem_gb: float = 0.0  # memory model: fixed + batch x per image (reduced-batch rule)
    mem_per_image_gb: float = 0.0
    throttle_batch: int = 0  # soft preemption: the batch this segment switches to (0: none)
    throttle_gpu: str = ""  # "<node>:<local index>" of the GPU it goes back to
    throttle_for: str = ""  # the job it made room for
    version: int = PLAN_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The wire form (JSON-safe); fields that are None are left out."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SegmentPlan:
        """Read a plan from its wire form; a plan without `version` is version 1."""
        if not isinstance(raw, Mapping):
            raise PlanError(f"plan: expected a mapping of fields, got {type(raw).__name__}")
        version = raw.get("version", 1)
        if isinstance(version, bool) or version not in KNOWN_PLAN_VERSIONS:
            known = ", ".join(map(str, KNOWN_PLAN_VERSIONS))
            raise PlanError(f"plan.version: got {version!r}, this yoloq reads version {known} "
                            "(a plan written by a newer yoloq: upgrade this node)")
        plan = object.__new__(cls)  # see _DEFAULTS
        values = plan.__dict__
        values.update(_DEFAULTS)
        for name, cast in _TYPED_FIELDS:
            value = raw.get(name)
            if value is not None:
                values[name] = value if type(value) is cast else _typed(name, cast, value)
        return plan

    def with_changes(self, **changes: Any) -> SegmentPlan:
        return dataclasses.replace(self, **changes)


_CASTS: dict[str, type] = {
    "team": str, "tier": str, "job_class": str, "throttle_gpu": str, "throttle_for": str,
    "est_mem_gb": float, "est_epoch_s": float, "submitted_at": float, "fixed_mem_gb": float,
    "mem_per_image_gb": float, "epochs": int, "epochs_done": int, "batch": int,
    "throttle_batch": int,
}
_TYPED_FIELDS = tuple((f.name, _CASTS[f.name]) for f in dataclasses.fields(SegmentPlan) if f.name != "version")
# The scheduler reads the plan of every open segment run at each pass, so `from_dict` fills the
# instance's fields itself instead of calling the frozen dataclass's slower __init__ (safe: every
# field has an immutable default, each value is type-checked, and there is no __post_init__).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SegmentPlan)}


def _typed(name: str, cast: type, value: Any) -> Any:
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise PlanError(f"plan.{name}: {value!r} is not of type {cast.__name__}") from None


def as_plan(value: SegmentPlan | Mapping[str, Any] | None) -> SegmentPlan:
    """A plan from what a caller holds: a plan, its wire form, or nothing (an empty plan)."""
    if isinstance(value, SegmentPlan):
        return value
    return SegmentPlan.from_dict(value or {})


def plan_of(run: Any) -> SegmentPlan:
    """The plan in a segment run's parameters (an empty plan when it has none)."""
    return as_plan((getattr(run, "parameters", None) or {}).get("plan"))


# ----------------------------------------------------------------- outcomes of segment runs
def _labels(run: Any) -> Mapping[str, Any]:
    return getattr(run, "labels", None) or {}


def preemption_requested(run: Any) -> bool:
    """The scheduler asked this segment to stop at its next epoch boundary."""
    return _labels(run).get(PREEMPT_LABEL) == PREEMPT_REQUESTED


def was_preempted(run: Any) -> bool:
    """The one definition: the segment ended Preempted (stopped at a boundary), or it ended
    Crashed while its preemption was requested (killed after its grace, or lost stopping)."""
    state = getattr(run, "state", None)
    if state is None:
        return False
    if state.name == PREEMPTED:
        return True
    return bool(state.is_crashed()) and preemption_requested(run)


def preemption_count(runs: Iterable[Any]) -> int:
    """How many of a job's segment runs were preempted (`was_preempted`)."""
    return sum(1 for run in runs if was_preempted(run))


def final_state(run: Any) -> str | None:
    """The segment's outcome as a state name: `Preempted` for every preempted segment (a
    killed victim too), else its state's name once final; None while it is not final."""
    state = getattr(run, "state", None)
    if state is None or not state.is_final():
        return None
    return PREEMPTED if was_preempted(run) else state.name


def start_epoch(run: Any) -> int:
    """The epoch the segment started from (its plan's `epochs_done`)."""
    return plan_of(run).epochs_done


def progress_epoch(run: Any) -> int:
    """The last epoch the segment checkpointed: its label, else its target once Completed,
    else the epoch it started from."""
    labels = _labels(run)
    if labels.get(EPOCH_LABEL) not in (None, ""):
        return int(labels[EPOCH_LABEL])
    state = getattr(run, "state", None)
    if state is not None and state.is_completed():
        return int((getattr(run, "parameters", None) or {}).get("stop_after_epoch", 0))
    return start_epoch(run)


def preempted_by(run: Any) -> str:
    """The job a preempted segment stopped for ("?" when the label is missing)."""
    return str(_labels(run).get(PREEMPTED_BY_LABEL, "?"))


def preempt_reason(run: Any) -> str:
    return str(_labels(run).get(PREEMPT_REASON_LABEL, ""))

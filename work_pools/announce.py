"""An urgent job is announced to the scheduler before its first segment exists.

Between `yoloq submit` and the urgent job's first segment run, its parent must be taken by the
job runner, start, and create the segment: about 0.8 s on a quiet 2-core host, during which a
victim could already be draining. The submit has analysed the job, so it writes the segment
plan the parent will write (team, tier, memory and epoch estimates) into a label of the parent
run. The leader's pass reads the announced parents that have no segment yet and lets `decide`
see each as a waiting segment: it asks a victim to stop at once, and keeps the freed GPU for the
job (nothing is ever started from an announcement; only a real segment is admitted).

The parent clears the label once its first segment exists, and an announcement older than
`WINDOW_S` is ignored, so a parent that fails before queuing holds nothing for long. Only
urgent jobs are announced: they are the ones whose start latency matters, and a burst of
announced sweep jobs would only duplicate demand the runner's start gate is still queuing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from work_pools.segments import TIER_LABEL, SegmentView, segment_view
from yoloq.domain.contract import ANNOUNCE_LABEL, SegmentPlan, as_plan, tier_tag
from yoloq.domain.tiers import Tier

LABEL = ANNOUNCE_LABEL  # on a parent run: its first segment's plan (JSON), "" once queued
WINDOW_S = 120.0  # an announcement this old no longer counts (its parent is stuck or gone)
ANNOUNCED_TIERS = frozenset({Tier.URGENT})
ANNOUNCED_TAGS = frozenset(tier_tag(tier.label) for tier in ANNOUNCED_TIERS)  # as `job_tags` writes them


def announce_labels(plan: SegmentPlan | Mapping[str, Any] | None) -> dict[str, str]:
    """The parent run's labels that announce its first segment's `plan` (None: not announced)."""
    if plan is None:
        return {}
    plan = as_plan(plan)
    if Tier.parse(plan.tier or "normal") not in ANNOUNCED_TIERS:
        return {}
    plan = plan.with_changes(submitted_at=None)  # the leader reads the run's creation
    return {LABEL: json.dumps(plan.to_dict(), separators=(",", ":"))}


def announced_plan(run: Any) -> SegmentPlan | None:
    """The plan a parent run announces, or None (never announced, or already queued)."""
    raw = (run.labels or {}).get(LABEL)
    if not raw:
        return None
    try:
        plan = json.loads(raw)
    except ValueError:
        return None
    return SegmentPlan.from_dict(plan) if isinstance(plan, dict) else None


def announced_view(run: Any) -> SegmentView | None:
    """The waiting segment an announced parent run stands for (its id is the parent's)."""
    plan = announced_plan(run)
    params = run.parameters or {}
    if plan is None or "job_id" not in params:
        return None
    plan = plan.with_changes(submitted_at=run.created.timestamp() if run.created else None)
    retiered = (run.labels or {}).get(TIER_LABEL)  # `yoloq retier` before the first segment
    stand_in = SimpleNamespace(
        id=run.id, name=f"{params['job_id']} (announced)",
        labels={TIER_LABEL: retiered} if retiered else {},
        parameters={"plan": plan.to_dict(), "spec": params.get("spec") or {}, "job_id": params["job_id"]},
        expected_start_time=run.created, created=run.created)
    return segment_view(stand_in)


async def announced_views(client: Any, jobs_pool: str, now: float) -> list[SegmentView]:
    """Urgent parents of `jobs_pool` announced in the last `WINDOW_S` (the caller drops those
    whose job has, or has had, a segment: a label may outlive a parent that died before
    clearing it)."""
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterExpectedStartTime,
                                                FlowRunFilterState, FlowRunFilterStateType,
                                                FlowRunFilterTags)
    from prefect.client.schemas.objects import StateType

    from work_pools.usage import _runs

    since = datetime.fromtimestamp(now - WINDOW_S, timezone.utc)
    runs = await _runs(client, jobs_pool, FlowRunFilter(
        tags=FlowRunFilterTags(all_=[tier_tag(Tier.URGENT.label)]),  # the one announced tier
        expected_start_time=FlowRunFilterExpectedStartTime(after_=since),
        state=FlowRunFilterState(type=FlowRunFilterStateType(
            any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING]))))
    views = (announced_view(run) for run in runs)
    return [v for v in views if v is not None]


def withdrawn() -> dict[str, str]:
    """The label update that clears an announcement (the parent has queued its first segment)."""
    return {LABEL: ""}


def urgent_job_submitted(event: Any, jobs_pool: str = "") -> bool:
    """A Prefect event saying an announced job was just submitted (its parent run of the jobs
    pool turned Scheduled): the leader's pass should see it now, not at its next poll."""
    from work_pools import events_wake
    from yoloq.base.names import JOBS_POOL

    return (events_wake.state_type(event) == "SCHEDULED"
            and events_wake.in_pool(event, jobs_pool or JOBS_POOL)
            and any(events_wake.has_tag(event, tag) for tag in ANNOUNCED_TAGS))

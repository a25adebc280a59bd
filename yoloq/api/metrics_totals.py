"""Totals since the queue began, counted from Prefect's run records: the counters and
histograms of `/metrics`.

Nothing is counted in this process's memory alone: every number is a total over the job and
segment runs Prefect keeps, so it only grows between scrapes and reads the same after the API
restarts (its first scrape reads every run again). This process keeps what it has counted so
that later scrapes read only the runs that started or ended since the last one (less a margin,
`SLACK_S`, for records written out of order); a run is counted once, by its id.
"""

from __future__ import annotations

import datetime
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from yoloq.base.histogram import CumulativeHistogram
from yoloq.domain.tiers import Tier

SLACK_S = 600.0
WAIT_BUCKETS = (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
DURATION_BUCKETS = (30, 60, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
JOB_OUTCOMES = {"COMPLETED": "completed", "FAILED": "failed", "CRASHED": "failed", "CANCELLED": "cancelled"}

Labels = tuple[str, ...]


@dataclass
class Histogram:
    """A cumulative histogram per label set."""

    bounds: tuple[float, ...]
    series: dict[Labels, CumulativeHistogram] = field(default_factory=dict)

    def observe(self, labels: Labels, value: float) -> None:
        self.series.setdefault(labels, CumulativeHistogram(self.bounds)).observe(value)


@dataclass
class Totals:
    """What the counters and histograms export (labels: (team, tier), plus the state for
    segments that ended)."""

    submitted: Counter[Labels] = field(default_factory=Counter)
    jobs_ended: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (outcome, team, tier)
    segments_ended: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (team, tier, state)
    preemptions: Counter[Labels] = field(default_factory=Counter)
    epochs: Counter[Labels] = field(default_factory=Counter)
    waits: Histogram = field(default_factory=lambda: Histogram(WAIT_BUCKETS))
    durations: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))


class RecordTotals:
    """The totals, topped up from Prefect at each scrape (thread-safe; one per process).

    `read_segments(client, field, after)` and `read_jobs(client, field, after)` return the pool's
    segment runs / the job runs whose `field` (`start_time`, `end_time`, `expected_start_time`)
    is after `after` (every run when `after` is None). `was_preempted(run)` says whether a
    segment ended preempted.
    """

    def __init__(self, read_segments: Callable[..., list[Any]], read_jobs: Callable[..., list[Any]],
                 was_preempted: Callable[[Any], bool]) -> None:
        self._read_segments, self._read_jobs, self._was_preempted = read_segments, read_jobs, was_preempted
        self._lock = threading.Lock()
        self.totals = Totals()
        self._marks: dict[str, float | None] = {"segments": None, "jobs": None}
        self._started: set[Any] = set()  # segment ids whose wait is counted
        self._ended: set[Any] = set()  # segment and job ids whose end is counted
        self._jobs: set[Any] = set()  # job ids counted as submitted
        self._live_epochs: dict[Any, int] = {}  # epochs an open segment had trained at the last scrape

    def refresh(self, client: Any, open_segments: Iterable[Any], now: float) -> Counter[Labels]:
        """Count what is new since the last scrape; the epochs of open segments (which are
        still training) are returned, to add to the total without counting them twice."""
        with self._lock:
            self._count_segments(client, now)
            self._count_jobs(client, now)
            live: Counter[Labels] = Counter()
            for run in open_segments:
                if run.id in self._ended:
                    continue
                epochs = max(self._live_epochs.get(run.id, 0), _epochs_trained(run))
                self._live_epochs[run.id] = epochs
                live[_team_tier(run)] += epochs
            return live

    def _after(self, kind: str) -> datetime.datetime | None:
        mark = self._marks[kind]
        if mark is None:
            return None
        return datetime.datetime.fromtimestamp(mark - SLACK_S, datetime.timezone.utc)

    def _count_segments(self, client: Any, now: float) -> None:
        after = self._after("segments")
        runs = {r.id: r for r in self._read_segments(client, "start_time", after)}
        if after is not None:
            runs.update({r.id: r for r in self._read_segments(client, "end_time", after)})
        for run in runs.values():
            self._count_segment(run)
        self._marks["segments"] = now

    def _count_segment(self, run: Any) -> None:
        if run.start_time is None:
            return
        labels = _team_tier(run)
        if run.id not in self._started:
            self._started.add(run.id)
            queued = run.expected_start_time or run.created
            self.totals.waits.observe((labels[1],), max(0.0, (run.start_time - queued).total_seconds()))
        final = run.state is not None and run.state.is_final() and run.end_time is not None
        if not final or run.id in self._ended:
            return
        self._ended.add(run.id)
        state = run.state.name or run.state.type.value.title()
        self.totals.segments_ended[(*labels, state)] += 1
        self.totals.durations.observe((labels[1],), max(0.0, (run.end_time - run.start_time).total_seconds()))
        self.totals.epochs[labels] += max(self._live_epochs.pop(run.id, 0), _epochs_trained(run))
        if self._was_preempted(run):
            self.totals.preemptions[labels] += 1

    def _count_jobs(self, client: Any, now: float) -> None:
        after = self._after("jobs")
        runs = {r.id: r for r in self._read_jobs(client, "expected_start_time", after)}
        if after is not None:
            runs.update({r.id: r for r in self._read_jobs(client, "end_time", after)})
        for run in runs.values():
            labels = _job_labels(run)
            if run.id not in self._jobs:
                self._jobs.add(run.id)
                self.totals.submitted[labels] += 1
            outcome = JOB_OUTCOMES.get(run.state.type.value) if run.state is not None else None
            if outcome and run.id not in self._ended:
                self._ended.add(run.id)
                self.totals.jobs_ended[(outcome, *labels)] += 1
        self._marks["jobs"] = now


def _team_tier(run: Any) -> Labels:
    from work_pools.segments import segment_view

    view = segment_view(run)
    return view.team, view.tier.label


def _epochs_trained(run: Any) -> int:
    """Epochs this segment finished: its progress label less the epochs done before it."""
    from work_pools.segments import segment_view

    view = segment_view(run)
    return max(0, view.progress_epoch - view.epochs_done)


def _job_labels(run: Any) -> Labels:
    """(team, tier) from the job run's tags, as submitted (`team:X`, `tier:Y`)."""
    tags = {t.partition(":")[0]: t.partition(":")[2] for t in run.tags or [] if ":" in t}
    tier = tags.get("tier") or "normal"
    try:
        tier = Tier.parse(tier).label
    except Exception:  # noqa: BLE001 -- an unknown tag value is shown as it is, not dropped
        pass
    return tags.get("team") or "default", tier

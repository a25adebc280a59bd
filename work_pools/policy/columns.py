"""A list of segments read as numpy columns, each column read once and only when asked for.

A scheduling pass ranks, keys and buckets every waiting segment (10,000 in the pool
bench). Done segment by segment in Python that was most of `decide`'s time; done on
columns it is a few array operations. A missing time (`started_at`,
`measured_epoch_s` of None) reads as NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from work_pools.policy.model import FULL, SHORT, Segment


class Columns:
    """Each column is one list comprehension with the field named in it (the fastest read
    of a slotted dataclass: `getattr` or `attrgetter` per row cost about twice as much),
    turned into an array."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = segments
        self.n = len(segments)

    def _floats(self, values: list) -> np.ndarray:
        return np.fromiter(values, float, self.n)

    def _optional_floats(self, values: list) -> np.ndarray:
        return np.array([math.nan if v is None else v for v in values], float).reshape(self.n)

    @cached_property
    def ids(self) -> list[str]:
        return [s.id for s in self.segments]

    @cached_property
    def id_array(self) -> np.ndarray:
        """`ids` as an object array: many rows' ids are taken at once."""
        return np.array(self.ids, dtype=object).reshape(self.n)

    @cached_property
    def teams(self) -> list[str]:
        return [s.team for s in self.segments]

    @cached_property
    def team_codes(self) -> tuple[list[str], np.ndarray]:
        """(team names sorted, each segment's team as an index into them)."""
        names = sorted(set(self.teams))
        code = {team: n for n, team in enumerate(names)}
        return names, np.fromiter(map(code.__getitem__, self.teams), np.int64, self.n)

    @cached_property
    def tier(self) -> np.ndarray:
        return np.fromiter([s.tier for s in self.segments], np.int64, self.n)

    @cached_property
    def submitted_at(self) -> np.ndarray:
        return self._floats([s.submitted_at for s in self.segments])

    @cached_property
    def waiting_since(self) -> np.ndarray:
        return self._floats([s.waiting_since for s in self.segments])

    @cached_property
    def started_at(self) -> np.ndarray:
        return self._optional_floats([s.started_at for s in self.segments])

    @cached_property
    def attained_gpu_s(self) -> np.ndarray:
        return self._floats([s.attained_gpu_s for s in self.segments])

    @cached_property
    def held_window_s(self) -> np.ndarray:
        return self._floats([s.held_window_s for s in self.segments])

    @cached_property
    def gpus(self) -> np.ndarray:
        return self._floats([s.gpus for s in self.segments])

    @cached_property
    def est_remaining_s(self) -> np.ndarray:
        return self._floats([s.est_remaining_s for s in self.segments])

    @cached_property
    def measured_epoch_s(self) -> np.ndarray:
        return self._optional_floats([s.measured_epoch_s for s in self.segments])

    @cached_property
    def epoch(self) -> np.ndarray:
        return self._floats([s.epoch for s in self.segments])

    @cached_property
    def epochs(self) -> np.ndarray:
        return self._floats([s.epochs for s in self.segments])

    @cached_property
    def measured(self) -> np.ndarray:
        """Rows whose job has run an epoch: its measured epoch time counts, not the estimate."""
        return ~np.isnan(self.measured_epoch_s) & (self.measured_epoch_s != 0) & (self.epochs != 0)

    @cached_property
    def remaining_work(self) -> np.ndarray:
        """GPU-seconds (speed 1.0) each job still needs: measured epoch time x epochs left when
        the job has run an epoch, else the analysis estimate. Read by several rules of a pass."""
        left = np.maximum(self.epochs - self.epoch, 0)
        return self.gpus * np.where(self.measured, self.measured_epoch_s * left, self.est_remaining_s)

    @cached_property
    def job_classes(self) -> np.ndarray:
        return np.array([s.job_class for s in self.segments], dtype=object).reshape(self.n)

    @cached_property
    def short(self) -> np.ndarray:
        return self.job_classes == SHORT

    @cached_property
    def full(self) -> np.ndarray:
        return self.job_classes == FULL

    @cached_property
    def est_mem_gb(self) -> np.ndarray:
        return self._floats([s.est_mem_gb for s in self.segments])

    def in_teams(self, teams: frozenset[str]) -> np.ndarray:
        """Which segments belong to one of `teams`."""
        if not teams:
            return np.zeros(self.n, bool)
        return np.fromiter([t in teams for t in self.teams], bool, self.n)

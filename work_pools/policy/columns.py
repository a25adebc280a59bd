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
from operator import itemgetter

import numpy as np

from work_pools.policy.model import FULL, SHORT, Segment
from yoloq.domain.tiers import Tier

_TIER = {tier: int(tier) for tier in Tier}


class Columns:
    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = segments
        self.n = len(segments)

    @cached_property
    def _fields(self) -> list[dict]:
        """Each segment's field dict: reading a key is faster than `getattr` (a frozen
        dataclass keeps its fields there)."""
        return [vars(s) for s in self.segments]

    def _floats(self, attr: str) -> np.ndarray:
        return np.fromiter(map(itemgetter(attr), self._fields), float, self.n)

    def _optional_floats(self, attr: str) -> np.ndarray:
        values = map(itemgetter(attr), self._fields)
        return np.array([math.nan if v is None else v for v in values], float).reshape(self.n)

    @cached_property
    def ids(self) -> list[str]:
        return [s.id for s in self.segments]

    @cached_property
    def teams(self) -> list[str]:
        return [s.team for s in self.segments]

    @cached_property
    def tier(self) -> np.ndarray:
        return np.array([_TIER[s.tier] for s in self.segments], np.int64).reshape(self.n)

    @cached_property
    def submitted_at(self) -> np.ndarray:
        return self._floats("submitted_at")

    @cached_property
    def waiting_since(self) -> np.ndarray:
        return self._floats("waiting_since")

    @cached_property
    def started_at(self) -> np.ndarray:
        return self._optional_floats("started_at")

    @cached_property
    def attained_gpu_s(self) -> np.ndarray:
        return self._floats("attained_gpu_s")

    @cached_property
    def held_window_s(self) -> np.ndarray:
        return self._floats("held_window_s")

    @cached_property
    def gpus(self) -> np.ndarray:
        return self._floats("gpus")

    @cached_property
    def est_remaining_s(self) -> np.ndarray:
        return self._floats("est_remaining_s")

    @cached_property
    def measured_epoch_s(self) -> np.ndarray:
        return self._optional_floats("measured_epoch_s")

    @cached_property
    def epoch(self) -> np.ndarray:
        return self._floats("epoch")

    @cached_property
    def epochs(self) -> np.ndarray:
        return self._floats("epochs")

    @cached_property
    def job_classes(self) -> np.ndarray:
        return np.array([s.job_class for s in self.segments], dtype=object)

    @cached_property
    def short(self) -> np.ndarray:
        return self.job_classes == SHORT

    @cached_property
    def full(self) -> np.ndarray:
        return self.job_classes == FULL

    @cached_property
    def est_mem_gb(self) -> np.ndarray:
        return self._floats("est_mem_gb")

    def in_teams(self, teams: frozenset[str]) -> np.ndarray:
        """Which segments belong to one of `teams`."""
        if not teams:
            return np.zeros(self.n, bool)
        return np.array([t in teams for t in self.teams], bool).reshape(self.n)

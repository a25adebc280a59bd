"""A cumulative histogram as Prometheus exports one: a count per upper bound (each counting
every value at or below it), a `+Inf` count, and the sum. Pure; no I/O.

`to_dict()` is the form a process publishes for another to export (the pool leader's
decision times in `yoloq-scheduler-stats`, read by `/metrics`): {"bounds", "counts", "sum"},
`counts` one per bound then the `+Inf` count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DECIDE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Bounds (seconds) for the leader's decision and pass times."""


@dataclass
class CumulativeHistogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self) -> None:
        if list(self.bounds) != sorted(self.bounds):
            raise ValueError(f"histogram bounds must increase: {self.bounds}")
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return self.counts[-1]

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, `+Inf` last (what `HistogramMetricFamily` takes)."""
        return [(str(float(b)), self.counts[i]) for i, b in enumerate(self.bounds)] + [("+Inf", self.counts[-1])]

    def to_dict(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> CumulativeHistogram:
        bounds = tuple(float(b) for b in value["bounds"])
        counts = [int(c) for c in value["counts"]]
        if len(counts) != len(bounds) + 1:
            raise ValueError(f"a histogram with {len(bounds)} bounds needs {len(bounds) + 1} counts")
        return cls(bounds, counts, float(value.get("sum", 0.0)))

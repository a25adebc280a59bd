"""Priority tiers. The direction is defined here once: a lower value is more urgent.

This matches Prefect's work-queue priority (lower first), so a tier's value is
also its queue priority in the `yolo-gpu` pool.
"""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    URGENT = 1
    HIGH = 2
    NORMAL = 3
    LOW = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def queue(self) -> str:
        """The work queue of the `yolo-gpu` pool that holds this tier's segments."""
        return self.label

    @classmethod
    def parse(cls, value: "str | int | Tier") -> "Tier":
        if isinstance(value, Tier):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[str(value).strip().upper()]
        except KeyError:
            names = ", ".join(t.label for t in cls)
            raise ValueError(f"unknown priority {value!r}; use one of: {names}") from None

    def outranks(self, other: "Tier") -> bool:
        """True when this tier is strictly more urgent than `other`."""
        return self.value < other.value


TIER_NAMES = tuple(t.label for t in Tier)

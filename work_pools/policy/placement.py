"""Memory-aware placement: a working copy of the GPUs for one decision.

GPUs are kept in lists sorted by free memory, so finding the best fit (the
GPU with the least free memory that still fits, the faster on ties) is a
bisection. Without `share_gpus` a GPU hosts one segment; with it, small
segments (see `rules.is_small`) may share a GPU whose occupants are all small.
`decide` builds one pool per call and never touches the snapshot's GPUs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from work_pools.policy import rules
from work_pools.policy.model import Gpu, Policy, Segment

_Entry = tuple[float, float, int]  # (free GB, -speed, index): sorted = best fit first


class GpuPool:
    def __init__(self, gpus: Iterable[Gpu], running: Iterable[Segment], policy: Policy) -> None:
        self.policy = policy
        self.gpus = {g.index: g for g in gpus}
        self.free = {i: g.mem_free_gb for i, g in self.gpus.items()}
        self.occupants: dict[int, list[tuple[str, float]]] = {i: [] for i in self.gpus}
        self.reserved: set[int] = set()
        for seg in running:
            for i in seg.gpu_indices:
                if i in self.occupants:
                    self.occupants[i].append((seg.id, seg.est_mem_gb))
        self._empty: list[_Entry] = []
        self._shared: list[_Entry] = []
        for i in self.gpus:
            self._file(i)
        totals = sorted((g.mem_total_gb for g in self.gpus.values()), reverse=True)
        self.totals_desc = totals

    # -- bookkeeping ------------------------------------------------------
    def _entry(self, i: int) -> _Entry:
        return (self.free[i], -self.gpus[i].speed, i)

    def _file(self, i: int) -> None:
        """Put GPU i in the list it belongs to (if any)."""
        if i in self.reserved:
            return
        occupants = self.occupants[i]
        if not occupants:
            bisect.insort(self._empty, self._entry(i))
        elif self.policy.share_gpus and self.free[i] > 0 and all(
                rules.is_small(mem, self.gpus[i].mem_total_gb, self.policy) for _, mem in occupants):
            bisect.insort(self._shared, self._entry(i))

    def _unfile(self, i: int) -> None:
        for sorted_list in (self._empty, self._shared):
            pos = bisect.bisect_left(sorted_list, self._entry(i))
            if pos < len(sorted_list) and sorted_list[pos][2] == i:
                del sorted_list[pos]
                return

    def is_small(self, mem_gb: float, i: int) -> bool:
        return rules.is_small(mem_gb, self.gpus[i].mem_total_gb, self.policy)

    # -- queries ----------------------------------------------------------
    def could_ever_fit(self, seg: Segment) -> bool:
        """Would the segment fit on an empty cluster?"""
        need = seg.gpus
        return need <= len(self.totals_desc) and self.totals_desc[need - 1] >= seg.est_mem_gb

    def fitting_free(self, mem_gb: float, count: int, allow_shared: bool) -> list[int]:
        """Up to `count` GPUs that fit `mem_gb` now, best fit first."""
        key = (mem_gb, float("-inf"), -1)
        start = bisect.bisect_left(self._empty, key)
        found = self._empty[start:start + count]
        if allow_shared:
            start = bisect.bisect_left(self._shared, key)
            shared = [e for e in self._shared[start:] if self.is_small(mem_gb, e[2])][:count]
            found = sorted(found + shared)
        return [e[2] for e in found[:count]]

    def find(self, seg: Segment) -> tuple[int, ...] | None:
        """Best-fit GPUs for the segment now, or None."""
        allow_shared = self.policy.share_gpus and seg.gpus == 1
        chosen = self.fitting_free(seg.est_mem_gb, seg.gpus, allow_shared)
        return tuple(chosen) if len(chosen) == seg.gpus else None

    def find_reduced(self, seg: Segment) -> tuple[int, int] | None:
        """(GPU, batch): the empty GPU allowing the largest reduced batch, or None."""
        if seg.gpus != 1 or not self._empty:
            return None
        free, _, index = max(self._empty, key=lambda e: (e[0], -e[1], -e[2]))
        batch = rules.reduced_batch(seg, free, self.policy)
        return (index, batch) if batch else None

    # -- changes ----------------------------------------------------------
    def take(self, indices: Iterable[int], seg_id: str, mem_gb: float) -> None:
        for i in indices:
            self._unfile(i)
            self.free[i] -= mem_gb
            self.occupants[i].append((seg_id, mem_gb))
            self._file(i)

    def reserve(self, indices: Iterable[int]) -> None:
        """Hold GPUs for a preemptor: nobody else is placed there this round."""
        for i in indices:
            self._unfile(i)
            self.reserved.add(i)


def describe(pool: GpuPool, indices: tuple[int, ...]) -> str:
    """"GPU 2 (A100-80GB, 80.0 GB free)" or "GPUs 0, 1 (A100-80GB)"."""
    gpus = [pool.gpus[i] for i in indices]
    if len(gpus) == 1:
        return f"GPU {gpus[0].index} ({gpus[0].name}, {pool.free[gpus[0].index]:.1f} GB free)"
    names = ", ".join(sorted({g.name for g in gpus}))
    return f"GPUs {', '.join(str(g.index) for g in gpus)} ({names})"

"""Memory-aware placement: a working copy of the GPUs for one decision.

A GPU is (node, index). The pool numbers them with internal *slots* (0..n-1,
in snapshot order) and keeps lists sorted by free memory, so finding the best
fit (the GPU with the least free memory that still fits, the faster on ties)
is a bisection. A multi-GPU segment takes GPUs on one node only: the node
whose g-th best-fitting GPU has the least free memory wins (ties: node name).
Without `share_gpus` a GPU hosts one segment; with it, small segments (see
`rules.is_small`) may share a GPU whose occupants are all small.
`decide` builds one pool per call and never touches the snapshot's GPUs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from work_pools.policy import rules
from work_pools.policy.model import Gpu, Policy, Segment

_Entry = tuple[float, float, int]  # (free GB, -speed, slot): sorted = best fit first


class GpuPool:
    def __init__(self, gpus: Iterable[Gpu], running: Iterable[Segment], policy: Policy) -> None:
        self.policy = policy
        gpu_list = list(gpus)
        self.gpus = dict(enumerate(gpu_list))  # slot -> Gpu
        self.slot_of = {g.key: s for s, g in self.gpus.items()}
        self.node_of = [g.node for g in gpu_list]
        self.multi_node = len(set(self.node_of)) > 1
        self.free = [g.mem_free_gb for g in gpu_list]
        self.occupants: list[list[tuple[str, float]]] = [[] for _ in gpu_list]
        self.reserved: set[int] = set()
        self._slots_of: dict[str, list[int]] = {}  # running segment id -> its slots
        for seg in running:
            for s in self.slots(seg):
                self.occupants[s].append((seg.id, seg.est_mem_gb))
        self._empty: list[_Entry] = []
        self._shared: list[_Entry] = []
        for s in self.gpus:
            self._file(s)
        self.totals_desc = sorted((g.mem_total_gb for g in gpu_list), reverse=True)
        self._node_totals = _node_totals(gpu_list)
        self._ever_fits: dict[tuple[int, float], bool] = {}

    def slots(self, seg: Segment) -> list[int]:
        """The pool slots of a running segment's GPUs (unknown GPUs are skipped); fixed for
        the call, so the victim search asks once per victim."""
        found = self._slots_of.get(seg.id)
        if found is None:
            keys = ((seg.node, i) for i in seg.gpu_indices)
            found = self._slots_of[seg.id] = [self.slot_of[k] for k in keys if k in self.slot_of]
        return found

    # -- bookkeeping ------------------------------------------------------
    def _entry(self, s: int) -> _Entry:
        return (self.free[s], -self.gpus[s].speed, s)

    def _file(self, s: int) -> None:
        """Put slot s in the list it belongs to (if any)."""
        if s in self.reserved:
            return
        occupants = self.occupants[s]
        if not occupants:
            bisect.insort(self._empty, self._entry(s))
        elif self.policy.share_gpus and self.free[s] > 0 and all(
                rules.is_small(mem, self.gpus[s].mem_total_gb, self.policy) for _, mem in occupants):
            bisect.insort(self._shared, self._entry(s))

    def _unfile(self, s: int) -> None:
        for sorted_list in (self._empty, self._shared):
            pos = bisect.bisect_left(sorted_list, self._entry(s))
            if pos < len(sorted_list) and sorted_list[pos][2] == s:
                del sorted_list[pos]
                return

    def is_small(self, mem_gb: float, s: int) -> bool:
        return rules.is_small(mem_gb, self.gpus[s].mem_total_gb, self.policy)

    @property
    def any_free(self) -> bool:
        """Is any GPU still available for placement (empty or shareable)?"""
        return bool(self._empty or self._shared)

    # -- queries ----------------------------------------------------------
    def could_ever_fit(self, seg: Segment) -> bool:
        """Would the segment fit on an empty cluster (all its GPUs on one node)?"""
        key = (seg.gpus, seg.est_mem_gb)
        known = self._ever_fits.get(key)
        if known is None:
            known = self._ever_fits[key] = self._could_ever_fit(*key)
        return known

    def _could_ever_fit(self, need: int, mem_gb: float) -> bool:
        if need > len(self.totals_desc) or self.totals_desc[need - 1] < mem_gb:
            return False
        if not self.multi_node or need == 1:
            return True
        return any(len(t) >= need and t[need - 1] >= mem_gb for t in self._node_totals.values())

    def fitting_free(self, mem_gb: float, count: int, allow_shared: bool) -> list[int]:
        """Up to `count` slots on one node that fit `mem_gb` now, best fit first.
        With several nodes and fewer than `count` on any one node, the best node's."""
        key = (mem_gb, float("-inf"), -1)
        start = bisect.bisect_left(self._empty, key)
        if count == 1:
            found = self._empty[start:start + 1]
            if allow_shared:
                pos = bisect.bisect_left(self._shared, key)
                shared = [e for e in self._shared[pos:] if self.is_small(mem_gb, e[2])][:1]
                found = sorted(found + shared)[:1]
            return [e[2] for e in found]
        if not self.multi_node:
            return [e[2] for e in self._empty[start:start + count]]
        return self._one_node(self._empty, start, count)

    def _one_node(self, entries: list[_Entry], start: int, count: int) -> list[int]:
        per_node: dict[str, list[int]] = {}
        for _, _, s in entries[start:]:
            group = per_node.setdefault(self.node_of[s], [])
            group.append(s)
            if len(group) == count:
                return group
        return max(per_node.values(), key=len, default=[])

    def fitting_by_node(self, mem_gb: float, allow_shared: bool) -> dict[str, list[int]]:
        """Every slot that fits `mem_gb` now, grouped by node, best fit first."""
        key = (mem_gb, float("-inf"), -1)
        entries = self._empty[bisect.bisect_left(self._empty, key):]
        if allow_shared:
            pos = bisect.bisect_left(self._shared, key)
            entries = sorted(entries + [e for e in self._shared[pos:] if self.is_small(mem_gb, e[2])])
        grouped: dict[str, list[int]] = {}
        for _, _, s in entries:
            grouped.setdefault(self.node_of[s], []).append(s)
        return grouped

    def find(self, seg: Segment, fastest: bool = False) -> tuple[int, ...] | None:
        """Best-fit slots for the segment now (one node), or None. `fastest`: the fastest
        empty GPUs that fit instead (a critical-path job: its own time is the makespan's)."""
        allow_shared = self.policy.share_gpus and seg.gpus == 1
        chosen = self.fitting_free(seg.est_mem_gb, seg.gpus, allow_shared)
        if len(chosen) != seg.gpus:
            return None
        if fastest:
            chosen = self._fastest(seg.est_mem_gb, seg.gpus) or chosen
        return tuple(chosen)

    def _fastest(self, mem_gb: float, count: int) -> list[int]:
        """`count` empty slots on one node that fit `mem_gb`, as fast as possible (the
        slowest of them decides a gang's speed), best fit among equals."""
        key = (mem_gb, float("-inf"), -1)
        entries = self._empty[bisect.bisect_left(self._empty, key):]
        per_node: dict[str, list[_Entry]] = {}
        for entry in entries:
            per_node.setdefault(self.node_of[entry[2]], []).append(entry)
        best: tuple[float, list[int]] | None = None
        for group in per_node.values():
            if len(group) < count:
                continue
            picked = sorted(group, key=lambda e: (e[1], e[0], e[2]))[:count]  # fastest, then fit
            speed = min(-e[1] for e in picked)
            if best is None or speed > best[0]:
                best = (speed, [e[2] for e in picked])
        return best[1] if best else []

    def find_reduced(self, seg: Segment) -> tuple[int, int] | None:
        """(slot, batch): the empty GPU allowing the largest reduced batch, or None."""
        if seg.gpus != 1 or not self._empty:
            return None
        free, _, slot = max(self._empty, key=lambda e: (e[0], -e[1], -e[2]))
        batch = rules.reduced_batch(seg, free, self.policy)
        return (slot, batch) if batch else None

    def node_and_indices(self, slots: Iterable[int]) -> tuple[str, tuple[int, ...]]:
        chosen = [self.gpus[s] for s in slots]
        return (chosen[0].node if chosen else "local"), tuple(g.index for g in chosen)

    # -- changes ----------------------------------------------------------
    def take(self, slots: Iterable[int], seg_id: str, mem_gb: float) -> None:
        for s in slots:
            self._unfile(s)
            self.free[s] -= mem_gb
            self.occupants[s].append((seg_id, mem_gb))
            self._file(s)

    def reserve(self, slots: Iterable[int]) -> None:
        """Hold GPUs for a preemptor: nobody else is placed there this round."""
        for s in slots:
            self._unfile(s)
            self.reserved.add(s)

    def unreserve(self, slots: Iterable[int]) -> None:
        """Make held GPUs placeable again (their preemptor's turn has come)."""
        for s in slots:
            if s in self.reserved:
                self.reserved.discard(s)
                self._file(s)


def _node_totals(gpus: list[Gpu]) -> dict[str, list[float]]:
    totals: dict[str, list[float]] = {}
    for g in gpus:
        totals.setdefault(g.node, []).append(g.mem_total_gb)
    return {n: sorted(t, reverse=True) for n, t in totals.items()}


def describe(pool: GpuPool, slots: tuple[int, ...]) -> str:
    """"GPU 2 (A100-80GB, 80.0 GB free)", "GPUs 0, 1 (A100-80GB)"; " on node-b" with nodes."""
    gpus = [pool.gpus[s] for s in slots]
    where = f" on {gpus[0].node}" if pool.multi_node and gpus else ""
    if len(gpus) == 1:
        return f"GPU {gpus[0].index}{where} ({gpus[0].name}, {pool.free[slots[0]]:.1f} GB free)"
    names = ", ".join(sorted({g.name for g in gpus}))
    return f"GPUs {', '.join(str(g.index) for g in gpus)}{where} ({names})"

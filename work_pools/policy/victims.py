"""Preemption planning: which running segments to stop so a waiting one fits.

Victims are tried in `rules.victim_key` order (already stopping, lowest
priority, newest checkpoint, least progressed, id), adding the freed memory
GPU by GPU until the waiting segment would fit; victims that turn out not to
sit on the chosen GPUs are dropped again. Nothing is preempted unless the
segment then fits. Segments inside their minimum runtime are never victims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from work_pools.policy import rules
from work_pools.policy.model import Policy, Segment
from work_pools.policy.placement import GpuPool


@dataclass(frozen=True)
class Plan:
    gpu_indices: tuple[int, ...]
    victims: tuple[Segment, ...]


class VictimPlanner:
    def __init__(self, running: Iterable[Segment], ranks: Mapping[str, int],
                 ratios: Mapping[str, float], now: float, policy: Policy) -> None:
        self.ranks = ranks
        self.ratios = ratios
        self.policy = policy
        eligible = [v for v in running if v.stopping or (
            policy.preemption and not rules.protected_by_min_runtime(v, now, policy))]
        self.order = sorted(eligible, key=lambda v: rules.victim_key(v, ranks[v.id]))
        self.taken: set[str] = set()

    def may_preempt(self, seg: Segment, rank: int, victim: Segment) -> bool:
        if victim.stopping:
            return True
        victim_rank = self.ranks[victim.id]
        if rules.outranks(rank, victim_rank):
            return True
        return victim_rank == rank and rules.fair_share_may_preempt(
            self.ratios.get(seg.team, 0.0), self.ratios.get(victim.team, 0.0), self.policy)

    def plan(self, seg: Segment, rank: int, pool: GpuPool) -> Plan | None:
        allow_shared = self.policy.share_gpus and seg.gpus == 1
        ready = pool.fitting_free(seg.est_mem_gb, seg.gpus, allow_shared)
        freed: dict[int, float] = defaultdict(float)
        evicted: dict[int, int] = defaultdict(int)
        opened: list[int] = []
        chosen: list[Segment] = []
        for victim in self.order:
            if victim.id in self.taken or not self.may_preempt(seg, rank, victim):
                continue
            chosen.append(victim)
            for i in victim.gpu_indices:
                if i in pool.reserved or i not in pool.gpus or i in opened:
                    continue
                freed[i] += victim.est_mem_gb
                evicted[i] += 1
                if self._fits_after(pool, i, freed[i], evicted[i], seg):
                    opened.append(i)
            if len(ready) + len(opened) >= seg.gpus:
                break
        else:
            return None
        used = opened[:seg.gpus - len(ready)]
        needed = tuple(v for v in chosen if set(v.gpu_indices) & set(used))
        return Plan(tuple(ready) + tuple(used), needed)

    def _fits_after(self, pool: GpuPool, i: int, freed: float, evicted: int, seg: Segment) -> bool:
        if pool.free[i] + freed < seg.est_mem_gb:
            return False
        occupants = pool.occupants[i]
        if evicted >= len(occupants):
            return True
        return (self.policy.share_gpus and seg.gpus == 1 and pool.is_small(seg.est_mem_gb, i)
                and all(pool.is_small(mem, i) for _, mem in occupants))

    def commit(self, plan: Plan) -> None:
        self.taken.update(v.id for v in plan.victims)

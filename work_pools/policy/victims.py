"""Preemption planning: which running segments to stop so a waiting one fits.

Victims are tried across the whole pool in `rules.victim_key` order (already
stopping, lowest tier, least work lost since the last checkpoint, least
progressed, id), adding the freed memory GPU by GPU until the waiting segment
would fit on one node (free GPUs of that node count first); victims that turn
out not to sit on the chosen GPUs are dropped again. Nothing is preempted
unless the segment then fits. Victims are ordered by their tier
(`rules.victim_tier`), not by the aging boost they started with: that boost
comes from the usage history, which can lag a node's report, and ordering by
it once made a normal job the victim of an urgent one while a low job ran.
The boost still decides who *may* be preempted (`may_preempt`). Segments inside
their minimum runtime are never victims. A victim already stopping for a job that still waits is kept for that
job: otherwise a later pass hands it to whoever comes first, and the job it was
asked for preempts a second one. GPUs are pool slots (`placement.GpuPool`).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from work_pools.policy import rules
from work_pools.policy.model import Policy, Segment
from work_pools.policy.placement import GpuPool
from yoloq.domain.tiers import Tier

_URGENT = int(Tier.URGENT)


@dataclass(frozen=True)
class Plan:
    gpu_indices: tuple[int, ...]
    victims: tuple[Segment, ...]


@dataclass
class _NodeState:
    """One node's greedy victim choice during `VictimPlanner.plan`."""

    ready: list[int]
    freed: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    evicted: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    opened: list[int] = field(default_factory=list)
    chosen: list[tuple[Segment, list[int]]] = field(default_factory=list)
    done: bool = False

    def plan(self, need: int) -> Plan:
        used = set(self.opened[:need - len(self.ready)])
        victims = tuple(v for v, slots in self.chosen if used.intersection(slots))
        return Plan(tuple(self.ready) + tuple(s for s in self.opened if s in used), victims)


class VictimPlanner:
    def __init__(self, running: Iterable[Segment], ranks: Mapping[str, int],
                 ratios: Mapping[str, float], now: float, policy: Policy,
                 waiting: Iterable[Segment] = ()) -> None:
        running = list(running)
        self.ranks = ranks
        # victim order and set cost: the tier (`rules.victim_tier`); the right to preempt: `ranks`
        self.tiers = {v.id: rules.victim_tier(v, ranks[v.id], policy) for v in running}
        self.ratios = ratios
        self.policy = policy
        self.now = now
        eligible = [v for v in running if v.stopping or (
            policy.preemption and not rules.protected_by_min_runtime(v, now, policy))]
        self.order = sorted(eligible, key=lambda v: rules.victim_key(v, self.tiers[v.id], now))
        chosen = {v.id for v in eligible}
        self.protected = sorted(
            (v for v in running if v.id not in chosen and rules.urgent_may_override(v, policy)),
            key=lambda v: rules.victim_key(v, self.tiers[v.id], now))
        listed = chosen | {v.id for v in self.protected}
        self.sheltered = [v for v in running if v.id not in listed and not v.stopping] \
            if policy.soft_preemption else []
        self.sheltered.sort(key=lambda v: rules.victim_key(v, self.tiers[v.id], now))
        self.taken: set[str] = set()
        # jobs still waiting for a victim already asked to stop on their behalf
        asked_for = {v.stopping_for for v in running if v.stopping and v.stopping_for}
        self.claimants = asked_for & {s.job_id for s in waiting} if asked_for else set()
        self._head = 0  # self.order[:_head] are all taken
        self._softest_at, self._softest_rank = -1, 0
        self._fair_share_equal = policy.fair_share and policy.fairshare_preempt_over > 0

    def exhausted_for(self, rank: int) -> bool:
        """True when no segment of rank >= `rank` can preempt anyone any more this round
        (no victim left that is stopping, ranks lower, or is a fair-share target)."""
        order, taken = self.order, self.taken
        if rank <= _URGENT and any(v.id not in taken for v in self.protected):
            return False
        if self.sheltered and self._softest() > rank:
            return False  # a throttle may still help
        self._skip_taken()
        if self._head == len(order):
            return True
        first = order[self._head]  # stopping first, then the lowest tier (largest)
        if first.stopping:
            return False
        top = self.tiers[first.id]  # no untaken victim ranks below its tier
        return top < rank or (top == rank and not self._fair_share_equal)

    def has_claim(self, seg: Segment) -> bool:
        """Is a stopping victim kept for this segment's job (more victims than for others)?"""
        return seg.job_id in self.claimants

    def release(self, job_id: str) -> bool:
        """The job got GPUs some other way: a victim stopping for it is anybody's now.
        True when it had one (the pool of possible victims grew)."""
        if job_id not in self.claimants:
            return False
        self.claimants.discard(job_id)
        return True

    def may_preempt(self, seg: Segment, rank: int, victim: Segment) -> bool:
        if victim.stopping:
            return victim.stopping_for == seg.job_id or victim.stopping_for not in self.claimants
        victim_rank = self.ranks[victim.id]
        if rules.outranks(rank, victim_rank):
            return True
        return victim_rank == rank and rules.fair_share_may_preempt(
            self.ratios.get(seg.team, 0.0), self.ratios.get(victim.team, 0.0), self.policy)

    def plan(self, seg: Segment, rank: int, pool: GpuPool) -> Plan | None:
        """The cheapest victim set: per node, victims in `victim_key` order until the segment
        fits there (a single GPU: the first fit is the cheapest); with several candidate
        nodes for a gang, the node whose set `set_cost` is lowest."""
        need = seg.gpus
        tail = self.protected if rank <= _URGENT else []
        if need == 1:
            return self._first_fit(seg, rank, pool, tail)
        ready = pool.fitting_by_node(seg.est_mem_gb, False)
        states: dict[str, _NodeState] = {}
        best: tuple[tuple, Plan] | None = None
        for victim in self._candidates(rank, tail, lambda: best):
            if victim.id in self.taken or not self.may_preempt(seg, rank, victim):
                continue
            node = victim.node
            state = states.setdefault(node, _NodeState(ready.get(node, [])[:need]))
            if state.done:
                continue
            slots = pool.slots(victim)
            state.chosen.append((victim, slots))
            state.opened += list(self._freed_to_fit(pool, victim, slots, state.freed,
                                                    state.evicted, seg, state.opened))
            if len(state.ready) + len(state.opened) < need:
                continue
            state.done = True
            found = state.plan(need)
            if not pool.multi_node:
                return found
            cost = self.set_cost(found)
            if best is None or cost < best[0]:
                best = (cost, found)
        return best[1] if best else None

    def _first_fit(self, seg: Segment, rank: int, pool: GpuPool,
                   tail: list[Segment]) -> Plan | None:
        """One GPU: victims in order until some GPU would fit the segment (the first fit is
        the cheapest); the victims kept are those on that GPU. Slots are unique across nodes,
        so no per-node state is needed."""
        freed: dict[int, float] = defaultdict(float)
        evicted: dict[int, int] = defaultdict(int)
        chosen: list[tuple[Segment, list[int]]] = []
        for victim in self._candidates(rank, tail, lambda: None):
            if victim.id in self.taken or not self.may_preempt(seg, rank, victim):
                continue
            slots = pool.slots(victim)
            chosen.append((victim, slots))
            for s in self._freed_to_fit(pool, victim, slots, freed, evicted, seg, ()):
                return Plan((s,), tuple(v for v, on in chosen if s in on))
        return None

    def _freed_to_fit(self, pool: GpuPool, victim: Segment, slots: list[int],
                      freed: dict[int, float], evicted: dict[int, int], seg: Segment,
                      opened: Collection[int]) -> Iterator[int]:
        """Count `victim` out of its slots (reserved and already `opened` ones skipped) and
        yield, in slot order, those where `seg` now fits. Lazy: a caller that stops at the
        first leaves the later slots uncounted, as the one-GPU search does."""
        for s in slots:
            if s in pool.reserved or s in opened:
                continue
            freed[s] += victim.est_mem_gb
            evicted[s] += 1
            if self._fits_after(pool, s, freed[s], evicted[s], seg):
                yield s

    def _candidates(self, rank: int, tail: list[Segment],
                    best: Callable[[], tuple[tuple, Plan] | None]) -> Iterator[Segment]:
        """Victims in preference order, from the first not yet taken; then `tail` (protected
        victims an urgent segment may take, `rules.urgent_may_override`). Ranks only fall
        along the order, so the order is left early: at the first victim whose tier is above
        `rank` (a rank is never below the tier: nobody after it may be preempted), and, with
        no tail, at the first above the best set's most urgent victim (any set it completes
        costs more)."""
        for victim in itertools.islice(self.order, self._skip_taken(), None):
            if not victim.stopping:
                victim_rank = self.tiers[victim.id]
                if victim_rank < rank:
                    break
                found = best()
                if found is not None and not tail and victim_rank < -found[0][0]:
                    break
            yield victim
        yield from tail

    def _softest(self) -> int:
        """Largest rank among victims a throttle could still use (cached per taken count)."""
        if self._softest_at != len(self.taken):
            self._softest_at = len(self.taken)
            self._softest_rank = max((self.ranks[v.id] for v in (*self.protected, *self.sheltered)
                                      if v.id not in self.taken), default=0)
        return self._softest_rank

    def throttle_victim(self, seg: Segment, rank: int,
                        pool: GpuPool) -> tuple[Segment, int, int] | None:
        """(victim, slot, batch) for soft preemption: the first strictly lower-ranked victim
        in preference order (minimum runtime does not protect: nobody is stopped) that is
        alone on one GPU and can shrink its batch to make room, or None."""
        for victim in self.order + self.protected + self.sheltered:
            if victim.id in self.taken or victim.stopping:
                continue
            if not rules.outranks(rank, self.ranks[victim.id]):
                continue
            slots = pool.slots(victim)
            if len(slots) != 1 or slots[0] in pool.reserved or len(pool.occupants[slots[0]]) != 1:
                continue
            batch = rules.throttle_batch(victim, pool.gpus[slots[0]].mem_total_gb,
                                         seg.est_mem_gb, self.policy)
            if batch is not None:
                return victim, slots[0], batch
        return None

    def _skip_taken(self) -> int:
        """Move `_head` past the victims taken from the front of the order; returns it."""
        order, taken = self.order, self.taken
        while self._head < len(order) and order[self._head].id in taken:
            self._head += 1
        return self._head

    @property
    def any(self) -> bool:
        return bool(self.order or self.protected or self.sheltered)

    def set_cost(self, plan: Plan) -> tuple:
        """Lower tier first (the most urgent victim harmed has as low a tier as possible), then
        the least work lost (GPU-seconds since the victims' checkpoints), then fewest victims,
        then the victims' ids (deterministic whatever order the nodes came in)."""
        harmed = [v for v in plan.victims if not v.stopping]
        top = min((self.tiers[v.id] for v in harmed), default=10 ** 6)
        lost = sum(len(v.gpu_indices) * (self.now - v.last_checkpoint_at
                                         if v.last_checkpoint_at is not None else 1e12)
                   for v in harmed)
        return (-top, lost, len(harmed), tuple(sorted(v.id for v in plan.victims)))

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

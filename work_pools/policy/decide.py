"""`decide(snapshot, policy, now) -> Decision`: the whole scheduler, as a pure function.

For each waiting segment, in `ordering.FairQueue` order: place it on free GPUs
(best fit; the fastest for a critical-path job); else backfill it onto GPUs reserved
for a gang when it ends before the gang starts; else plan a preemption
(`victims.VictimPlanner`); else, when the policy allows, place it with a reduced
batch; else record why it waits, and a gang at the front reserves the GPUs it will
start on (`reservations`). The
snapshot is never mutated: placement works on its own copy of free memory.
Failed attempts are remembered per GPU count and memory (availability only
shrinks during one call), which keeps a 10,000-segment queue cheap.
"""

from __future__ import annotations

import numpy as np

from work_pools.policy import fairshare, rules
from work_pools.policy.model import (Admission, Decision, Policy, Preemption, Segment,
                                     Snapshot, Throttle)
from work_pools.policy.ordering import Context, FairQueue, build_context
from work_pools.policy.placement import GpuPool, describe
from work_pools.policy.reservations import Reservation, fits_in_window, reserve_for
from work_pools.policy.victims import Plan, VictimPlanner


class _FailureMemo:
    """Remembers requests that failed. Availability only shrinks during a call, so a
    request of the same kind, no better rank, no fewer GPUs and no less memory fails too."""

    def __init__(self) -> None:
        self._min_mem: dict[tuple, dict[tuple[int, int], float]] = {}

    def failed(self, kind: tuple, rank: int, gpus: int, mem_gb: float) -> bool:
        known = self._min_mem.get(kind)
        if not known:
            return False
        exact = known.get((rank, gpus))
        if exact is not None and mem_gb >= exact:
            return True
        return any(r <= rank and g <= gpus and mem_gb >= m for (r, g), m in known.items())

    def add(self, kind: tuple, rank: int, gpus: int, mem_gb: float) -> None:
        known = self._min_mem.setdefault(kind, {})
        known[(rank, gpus)] = min(mem_gb, known.get((rank, gpus), float("inf")))


BACKFILL_TRIES = 500  # segments tried on reserved GPUs per call (bounds a 10,000-deep queue)


class _Round:
    """Mutable working state of one `decide` call (never visible outside)."""

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.policy = policy
        self.ctx: Context = build_context(snapshot, policy, now)
        self.pool = GpuPool(snapshot.gpus, snapshot.running, policy)
        self.planner = VictimPlanner(snapshot.running, self.ctx.ranks, self.ctx.ratios, now, policy,
                                     snapshot.waiting)
        self.queue = FairQueue(self.ctx)
        self.held = self._hold(snapshot)
        self.admit: list[Admission] = []
        self.preempt: list[Preemption] = []
        self.throttle: list[Throttle] = []
        self.waiting: dict[str, str] = {}
        self.no_fit = _FailureMemo()
        self.no_victims = _FailureMemo()
        self._no_gpu: dict[tuple[int, float], str] = {}
        self.running = snapshot.running
        self.reservations: list[Reservation] = []
        self.promised: set[int] = set()  # slots some reservation will start on
        self.backfill_tries = BACKFILL_TRIES

    def _hold(self, snapshot: Snapshot) -> dict[str, list[int]]:
        """job -> free GPUs kept for it: its victim has exited, and without the hold a segment
        ahead of it in the queue takes the GPU and the job preempts a second victim."""
        held: dict[str, list[int]] = {}
        if not snapshot.held:
            return held
        waiting_jobs = {s.job_id for s in snapshot.waiting}
        for key, job in snapshot.held.items():
            slot = self.pool.slot_of.get(key)
            if slot is not None and job in waiting_jobs and not self.pool.occupants[slot]:
                held.setdefault(job, []).append(slot)
        for slots in held.values():
            self.pool.reserve(slots)
        return held

    def run(self) -> Decision:
        for seg, rank in self.queue:
            if self.exhausted(rank):
                self.rest_wait(seg)
                break
            self.waiting_reason(seg, rank)
        return Decision(tuple(self.admit), tuple(self.preempt), self.waiting, self.ctx.breaches,
                        tuple(self.throttle))

    def exhausted(self, rank: int) -> bool:
        """Nothing is free and nobody left may be preempted by this rank or any later one
        (ranks only grow along the queue): every segment still queued waits."""
        backfill = self.backfill_tries > 0 and any(r.free for r in self.reservations)
        return (not self.held and not self.pool.any_free and not backfill
                and self.planner.exhausted_for(rank))

    def rest_wait(self, current: Segment) -> None:
        """Reasons for `current` and every segment the queue has not reached, in queue order
        (a reason depends only on the segment and the exhausted pool). Most of 10,000
        waiting segments end here, so `reason` runs once per kind of segment (`_kinds`) and
        its text is shared by every segment of that kind."""
        self.waiting[current.id] = self.reason(current)
        rest = self.queue.unreached()
        if not len(rest):
            return
        _, first, kind_of = np.unique(self._kinds(rest), return_index=True, return_inverse=True)
        texts = [self.reason(self.queue.segments[row]) for row in rest[first].tolist()]
        reasons = np.array(texts, dtype=object)[kind_of.reshape(-1)]
        self.waiting.update(zip(self.ctx.waiting.id_array[rest].tolist(), reasons.tolist()))

    def _kinds(self, rows: np.ndarray) -> np.ndarray:
        """A code per row for what `reason` reads of it: its size (GPUs, memory), plus its team
        when the team is over quota (`why_waiting` names that first), else, when it yields to
        short experiments, the share it held in whole percent (what the text shows:
        `format(share, ".0%")` rounds `share * 100` half to even, as `np.rint` does)."""
        cols = self.ctx.waiting
        delayed = self.ctx.waiting_delayed[rows]
        yielding = self.queue.yield_mask[rows] & ~delayed
        names, teams = cols.team_codes
        extra = np.zeros(len(rows), np.int64)
        extra[delayed] = 1 + teams[rows[delayed]]
        if yielding.any():
            share = cols.held_window_s[rows[yielding]] / self.policy.long_job_window_s
            extra[yielding] = 1 + len(names) + np.rint(share * 100.0).astype(np.int64)
        gpus = cols.gpus[rows].astype(np.int64)
        _, mem = np.unique(cols.est_mem_gb[rows], return_inverse=True)
        size = mem.reshape(-1) * (int(gpus.max()) + 1) + gpus
        return extra * (int(size.max()) + 1) + size

    def waiting_reason(self, seg: Segment, rank: int) -> None:
        """Try to start `seg`; when it cannot, record why it waits."""
        if seg.job_id in self.held:  # its GPUs are placeable again: earlier misses may fit now
            self.pool.unreserve(self.held.pop(seg.job_id))
            self.no_fit = _FailureMemo()
        possible = self.pool.could_ever_fit(seg)
        if possible and (self.try_place(seg) or self.try_preempt(seg, rank)):
            return
        if self.policy.allow_reduced_batch and self.try_reduced(seg):
            return
        self.waiting[seg.id] = self.reason(seg)
        if possible and seg.gpus > 1 and self.policy.backfill_reservations and (
                seg.id in self.queue.critical):
            self.try_reserve(seg)

    def try_reserve(self, seg: Segment) -> None:
        """A gang at the front that cannot start: keep the GPUs it will start on."""
        found = reserve_for(seg, self.pool, self.running, self.ctx.now, self.policy, self.promised)
        if found is None:
            return
        self.pool.reserve(found.free)
        self.promised.update(found.slots)
        self.reservations.append(found)
        node, indices = self.pool.node_and_indices(found.slots)
        where = f" on {node}" if self.pool.multi_node else ""
        self.waiting[seg.id] = (f"waiting: GPUs {', '.join(map(str, indices))}{where} reserved for it, "
                                f"all free in about {found.window_s / 60:.0f} min (jobs that end "
                                f"sooner may use them until then)")

    def try_backfill(self, seg: Segment) -> bool:
        """Start `seg` on GPUs reserved for a gang when it ends before the gang starts."""
        if not self.reservations or self.backfill_tries <= 0:
            return False
        self.backfill_tries -= 1
        for res in self.reservations:
            slots = [s for s in res.free if self.pool.free[s] >= seg.est_mem_gb][:seg.gpus]
            if len(slots) < seg.gpus or len({self.pool.node_of[s] for s in slots}) != 1:
                continue
            speed = min(self.pool.gpus[s].speed for s in slots)
            if not fits_in_window(seg, res.window_s, speed):
                continue
            for s in slots:
                res.free.remove(s)
            self.pool.unreserve(slots)
            self.start(seg, tuple(slots), f"admitted on {describe(self.pool, tuple(slots))} "
                                          f"(backfill: ends before job {res.job_id} starts there)")
            return True
        return False

    def reason(self, seg: Segment) -> str:
        """Why `seg` waits once nothing could start it."""
        return self.why_waiting(seg) if self.pool.could_ever_fit(seg) else _too_big(seg, self.pool)

    def try_place(self, seg: Segment) -> bool:
        small = self.policy.share_gpus and seg.gpus == 1
        kind = ("small",) if small else ("whole",)
        if self.no_fit.failed(kind, 0, seg.gpus, seg.est_mem_gb):
            return self.try_backfill(seg)
        slots = self.pool.find(seg, fastest=seg.id in self.queue.critical)
        if slots is None:
            self.no_fit.add(kind, 0, seg.gpus, seg.est_mem_gb)
            return self.try_backfill(seg)
        self.start(seg, slots, f"admitted on {describe(self.pool, slots)}")
        return True

    def try_reduced(self, seg: Segment) -> bool:
        found = self.pool.find_reduced(seg)
        if found is None:
            return False
        slot, batch = found
        reason = (f"admitted on {describe(self.pool, (slot,))} with batch {batch} instead of "
                  f"{seg.batch} (reduced to fit; resume is no longer exact)")
        self.start(seg, (slot,), reason, batch)
        return True

    def start(self, seg: Segment, slots: tuple[int, ...], reason: str,
              batch: int | None = None) -> None:
        node, indices = self.pool.node_and_indices(slots)
        self.admit.append(Admission(seg.id, seg.job_id, indices, reason, batch, node))
        mem = seg.est_mem_gb if batch is None else seg.fixed_mem_gb + batch * seg.mem_per_image_gb
        speed = min(self.pool.gpus[s].speed for s in slots)
        self.pool.take(slots, seg.id, mem)
        self.queue.charge(seg.team, fairshare.tu(speed, self.policy.segment_s, seg.gpus))
        if self.planner.release(seg.job_id):
            self.no_victims = _FailureMemo()  # its stopping victim is free for all: more victims

    def try_preempt(self, seg: Segment, rank: int) -> bool:
        if not self.planner.any:
            return False
        starved = self.ctx.ratios.get(seg.team, 0.0) <= self.policy.fairshare_preempt_under
        kind = (starved,)
        rank = self.queue.preemption_rank(seg, rank)
        if self.policy.soft_preemption and seg.gpus == 1 and self.try_throttle(seg, rank):
            return True
        claim = self.planner.has_claim(seg)  # may take a victim kept for it: memo does not apply
        if not claim and self.no_victims.failed(kind, rank, seg.gpus, seg.est_mem_gb):
            return False
        plan = self.planner.plan(seg, rank, self.pool)
        if plan is None:
            if not claim:
                self.no_victims.add(kind, rank, seg.gpus, seg.est_mem_gb)
            return False
        self.planner.commit(plan)
        self.pool.reserve(plan.gpu_indices)
        self.record_preemption(seg, rank, plan)
        return True

    def try_throttle(self, seg: Segment, rank: int) -> bool:
        """Soft preemption: share the GPU of a strictly lower-ranked single-GPU segment that is
        alone on its GPU, whose batch shrinks at its next epoch boundary so both fit."""
        found = self.planner.throttle_victim(seg, rank, self.pool)
        if found is None:
            return False
        victim, slot, batch = found
        node, (index,) = self.pool.node_and_indices((slot,))
        label = rules.segment_label(seg, rank, self.policy)
        change = (f"keeps batch {batch}" if batch == victim.batch else
                  f"batch {victim.batch} -> {batch}, accumulate "
                  f"{rules.accumulate_for(victim.batch)} -> {rules.accumulate_for(batch)}")
        reason = (f"throttled for job {seg.job_id} ({label}) at epoch {victim.epoch + 1}: "
                  f"shares GPU {index}, {change} (effective batch kept)")
        self.throttle.append(Throttle(victim.id, victim.job_id, batch, victim.batch, seg.id,
                                      seg.job_id, node, index, reason))
        self.planner.taken.add(victim.id)
        self.pool.reserve((slot,))
        where = f" on {node}" if self.pool.multi_node else ""
        self.waiting[seg.id] = (f"waiting: shares GPU {index}{where} with job {victim.job_id} "
                                f"from its next epoch boundary (its batch {victim.batch} -> {batch})")
        return True

    def record_preemption(self, seg: Segment, rank: int, plan: Plan) -> None:
        label = rules.segment_label(seg, rank, self.policy)
        stopping, asked = [], []
        for victim in plan.victims:
            if victim.stopping:
                stopping.append(victim.job_id)
                continue
            asked.append(victim.job_id)
            why = _victim_why(victim, seg, rank, self.ctx)
            reason = f"preempted by job {seg.job_id} ({label}) at epoch {victim.epoch + 1}{why}"
            self.preempt.append(Preemption(victim.id, victim.job_id, seg.id, seg.job_id, reason))
        node, indices = self.pool.node_and_indices(plan.gpu_indices)
        gpus = ", ".join(str(i) for i in indices)
        where = f" on {node}" if self.pool.multi_node else ""
        jobs = ", ".join(asked + stopping)
        self.waiting[seg.id] = (f"waiting: GPU {gpus}{where} frees when job {jobs} "
                                f"stops at its epoch boundary")

    def why_waiting(self, seg: Segment) -> str:
        if seg.team in self.ctx.delayed_teams:
            breach = next(b for b in self.ctx.breaches if b.team == seg.team)
            return (f"waiting: team over quota ({breach.spent_tu:.2f} of {breach.budget_tu:.2f} TU "
                    f"this {breach.period}); runs only on GPUs nobody else wants")
        if seg.id in self.queue.yielding:
            return _yielding(rules.held_share(seg, self.policy), self.policy)
        key = (seg.gpus, seg.est_mem_gb)
        reason = self._no_gpu.get(key)
        if reason is None:
            gpus = "GPU" if seg.gpus == 1 else f"{seg.gpus} GPUs"
            reason = self._no_gpu[key] = f"waiting: no {gpus} with {seg.est_mem_gb:.1f} GB free"
        return reason


def _yielding(share: float, policy: Policy) -> str:
    return (f"waiting: yielding to short experiments (held a GPU {share:.0%} of the last "
            f"{policy.long_job_window_s / 3600:.1f} h)")


def _too_big(seg: Segment, pool: GpuPool) -> str:
    if seg.gpus > len(pool.totals_desc):
        return f"waiting: needs {seg.gpus} GPUs, the pool has {len(pool.totals_desc)}"
    largest = pool.totals_desc[0] if pool.totals_desc else 0.0
    if largest < seg.est_mem_gb or seg.gpus == 1 or not pool.multi_node:
        return f"waiting: needs {seg.est_mem_gb:.1f} GB per GPU; the largest GPU has {largest:.1f} GB"
    return (f"waiting: needs {seg.gpus} GPUs with {seg.est_mem_gb:.1f} GB on one node; "
            f"no node has that many (a segment never spans nodes)")


def _victim_why(victim: Segment, seg: Segment, rank: int, ctx: Context) -> str:
    if victim.team in ctx.delayed_teams:
        return f"; team {victim.team} is over quota"
    if ctx.ranks[victim.id] == rank and victim.team != seg.team:
        return f"; team {victim.team} is far over its fair share"
    return ""


def decide(snapshot: Snapshot, policy: Policy, now: float) -> Decision:
    """Which waiting segments start where, which running ones to preempt, and why."""
    return _Round(snapshot, policy, now).run()

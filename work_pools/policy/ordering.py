"""The order in which waiting segments are considered, shared by `decide` and `eta`.

Segments are bucketed by (effective priority, not starving, yields-to-short);
buckets are taken most urgent first, so a starving segment goes ahead of every
other segment of its rank, whatever its team's usage. Inside a bucket, with
fair share on, the next segment comes from the team with the lowest weighted
usage: decayed TU, plus what its running segments will use in the next
`segment_s`, plus what was admitted earlier in this round (`charge`): that is
`fair_share_mode="turns"`. With SRPT and `fair_share_mode="weight"` (yoloq's
default) the teams share one queue per bucket and fair share enters as a weight
on remaining work (`FairQueue.fair_factor`): usage over entitlement, corrected by
each team's projected finish-time fairness (`ftf`). Inside a team: with
`within_rank="srpt"` (yoloq's default) the least estimated remaining work first
(`Columns.remaining_work`: GPUs x remaining seconds, from measured epoch times when
known), aged by waiting (`srpt_keys`); with "submit", submission order. Ties:
submission order, then id. The rules run on numpy columns of the whole queue
(`columns.Columns`): a pass orders 10,000 waiting segments in the pool bench.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from work_pools.policy import fairshare, ftf, rules
from work_pools.policy.columns import Columns
from work_pools.policy.model import DELAYED_RANK, Policy, QuotaBreach, Snapshot, Segment
from work_pools.policy.priority import ranks_of, starvation_bound_s

_ALL = "*"  # the single queue used when fair share is off


@dataclass(frozen=True)
class Context:
    """Everything resolved once per call."""

    now: float
    policy: Policy
    breaches: tuple[QuotaBreach, ...]
    delayed_teams: frozenset[str]
    ranks: dict[str, int]  # running segment id -> effective priority (victims are running)
    ratios: dict[str, float]  # team -> usage share / entitlement
    usage: dict[str, float]  # team -> decayed TU + committed by running segments
    short_ranks: frozenset[int]  # ranks at which a short experiment is waiting
    waiting: Columns  # the snapshot's waiting segments
    waiting_ranks: np.ndarray  # their ranks, in snapshot order
    waiting_delayed: np.ndarray  # which of them belong to a team over quota
    running: Columns  # the snapshot's running segments
    capacity: float = 0.0  # the pool's GPUs, each counted at its speed
    gpu_count: int = 0  # the pool's GPUs (for their mean speed)

    @property
    def mean_speed(self) -> float:
        return self.capacity / max(self.gpu_count, 1)

    def ranks_at(self, now: float) -> dict[str, int]:
        """Segment id -> rank, running and waiting, at `now` (the ETA reads the queue ahead)."""
        running, waiting = _ranks(self.running, self.waiting, self.waiting_delayed, now,
                                  self.policy, self.delayed_teams)
        return {**running, **dict(zip(self.waiting.ids, waiting.tolist()))}


def build_context(snapshot: Snapshot, policy: Policy, now: float) -> Context:
    breaches = fairshare.quota_breaches(snapshot.team_period_tu, policy)
    delayed = frozenset(b.team for b in breaches)
    running, waiting = Columns(snapshot.running), Columns(snapshot.waiting)
    waiting_delayed = waiting.in_teams(delayed)
    ranks, waiting_ranks = _ranks(running, waiting, waiting_delayed, now, policy, delayed)
    teams = set(running.teams) | set(waiting.teams)
    ratios = fairshare.share_ratios(snapshot.team_usage_tu, teams, policy)
    usage = {t: snapshot.team_usage_tu.get(t, 0.0) for t in teams}
    speeds = {g.key: g.speed for g in snapshot.gpus}
    for seg in snapshot.running:
        speed = min((speeds.get((seg.node, i), 1.0) for i in seg.gpu_indices), default=1.0)
        usage[seg.team] += fairshare.tu(speed, policy.segment_s, seg.gpus)
    short_ranks = frozenset(waiting_ranks[waiting.short].tolist())
    capacity = sum(g.speed for g in snapshot.gpus)
    return Context(now, policy, breaches, delayed, ranks, ratios, usage, short_ranks, waiting,
                   waiting_ranks, waiting_delayed, running, capacity, len(snapshot.gpus))


def _ranks(running: Columns, waiting: Columns, waiting_delayed: np.ndarray, now: float,
           policy: Policy, delayed: frozenset[str]) -> tuple[dict[str, int], np.ndarray]:
    """(running segment id -> rank, the waiting segments' ranks by row)."""
    waiting_ranks = ranks_of(waiting, now, policy, waiting_delayed)
    running_ranks = ranks_of(running, now, policy, running.in_teams(delayed))
    return dict(zip(running.ids, running_ranks.tolist())), waiting_ranks


def srpt_keys(segments: Columns, now: float, policy: Policy) -> np.ndarray:
    """Shortest remaining work first, aged: the work shrinks by a factor 1 + waited /
    `srpt_aging_s`, so a long job that waits overtakes new short work eventually (and
    the starvation bound of `priority` still applies on top)."""
    work = segments.remaining_work
    if policy.srpt_aging_s <= 0:
        return work
    return work / (1.0 + np.maximum(0.0, now - segments.waiting_since) / policy.srpt_aging_s)


CRITICAL_KEY_SCALE = 1e-9  # a critical job's key: below every other key, SRPT order kept


def critical_path(ctx: Context) -> np.ndarray:
    """The critical-path rule, by waiting row: a job whose own remaining time on its GPUs
    (remaining work / GPUs / mean GPU speed) is at least `critical_path_share` of the pool's
    backlog (all remaining work, waiting and running, over the pool's capacity) would end
    after the queue drains if it waited: it goes ahead of its bucket, so long and gang jobs
    run beside the short ones instead of after them (makespan, utilisation)."""
    policy, cols = ctx.policy, ctx.waiting
    if policy.critical_path_share <= 0 or ctx.capacity <= 0 or not cols.n:
        return np.zeros(cols.n, bool)
    work = cols.remaining_work
    backlog_s = (work.sum() + ctx.running.remaining_work.sum()) / ctx.capacity
    own_s = work / (np.maximum(cols.gpus, 1) * ctx.mean_speed)
    return own_s >= policy.critical_path_share * backlog_s


class FairQueue:
    """Iterate waiting segments in policy order; `charge` a team for what it was given.
    One pass only: iterating again resumes where the last iteration was left."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        policy, now, cols = ctx.policy, ctx.now, ctx.waiting
        self.segments = cols.segments
        self.usage = dict(ctx.usage)
        srpt = policy.within_rank == "srpt" and policy.ordering == "tier"
        self.weighted = srpt and policy.fair_share and policy.fair_share_mode == "weight"
        teams = set(cols.teams) | set(self.usage)
        self._weights = {t: policy.weight(t) for t in teams}
        self._total_weight = sum(self._weights.values()) or 1.0
        self._total_usage = sum(max(0.0, self.usage.get(t, 0.0)) for t in teams)
        self._factors: dict[str, float] = {}  # team -> fair factor, until the next charge
        self._rho = self._team_rho() if self.weighted and policy.ftf_weight_power > 0 else {}
        self._charges = 0
        ranks = ctx.waiting_ranks
        self.yield_mask = yields = self._yielding_mask(ranks)  # by row; `yielding`: by id
        starving = self._starving_mask()
        self.yielding = {cols.ids[i] for i in np.flatnonzero(yields).tolist()}
        self.starving = {cols.ids[i] for i in np.flatnonzero(starving).tolist()}
        keys = srpt_keys(cols, now, policy) if srpt else np.zeros(cols.n)
        critical = critical_path(ctx) if srpt else np.zeros(cols.n, bool)
        keys = np.where(critical, keys * CRITICAL_KEY_SCALE, keys)
        self.critical = {cols.ids[i] for i in np.flatnonzero(critical).tolist()}
        self._keys, self._submitted = keys.tolist(), cols.submitted_at.tolist()
        bucket = ranks * 4 + (~starving) * 2 + yields  # sorts as (rank, not starving, yields)
        self._buckets = self._group(bucket, keys, policy.fair_share)
        self._at = 0  # buckets before it have been taken

    def _team_rho(self) -> dict[str, float]:
        """Projected finish-time fairness per team, once per pass: it moves with usage over
        hours, not with one round's admissions."""
        ctx = self.ctx
        return ftf.team_rho(ctx.running, ctx.waiting, ctx.now, ctx.policy, ctx.usage, ctx.gpu_count,
                            ctx.mean_speed)

    def _yielding_mask(self, ranks: np.ndarray) -> np.ndarray:
        """The 70% rule (`rules.yields_to_short`) for every waiting segment."""
        policy, cols = self.ctx.policy, self.ctx.waiting
        if not (rules.long_job_rule_on(policy) and self.ctx.short_ranks
                and policy.long_job_window_s > 0):
            return np.zeros(cols.n, bool)
        held = cols.held_window_s / policy.long_job_window_s > policy.long_job_share
        return np.isin(ranks, list(self.ctx.short_ranks)) & cols.full & held

    def _starving_mask(self) -> np.ndarray:
        policy, cols = self.ctx.policy, self.ctx.waiting
        if policy.ordering != "tier" or policy.aging_step_s <= 0:
            return np.zeros(cols.n, bool)
        bound = starvation_bound_s(policy)
        return np.isnan(cols.started_at) & (self.ctx.now - cols.waiting_since >= bound)

    def _group(self, bucket: np.ndarray, keys: np.ndarray,
               fair: bool) -> list[tuple[int, dict[str, _Run]]]:
        """(rank, team -> that team's segments in key order) per bucket, most urgent first.
        One sort: bucket, team, key, submission, id."""
        cols = self.ctx.waiting
        if not cols.n:
            return []
        names, team = cols.team_codes if fair else ([_ALL], np.zeros(cols.n, np.int64))
        group = bucket * len(names) + team  # sorts as (bucket, team)
        order = _by_id_on_ties(np.lexsort((cols.submitted_at, keys, group)), cols.ids,
                               (group, keys, cols.submitted_at))
        ordered = group[order]
        cuts = (np.flatnonzero(np.diff(ordered)) + 1).tolist()
        starts = [0, *cuts]
        order_list, codes = order.tolist(), ordered[starts].tolist()
        buckets: list[tuple[int, dict[str, _Run]]] = []
        for begin, end, code in zip(starts, [*cuts, cols.n], codes):
            bucket_code, team_code = divmod(code, len(names))
            if not buckets or buckets[-1][0] != bucket_code:
                buckets.append((bucket_code, {}))
            buckets[-1][1][names[team_code]] = _Run(order_list[begin:end])
        return [(bucket_code // 4, queues) for bucket_code, queues in buckets]

    def preemption_rank(self, seg: Segment, rank: int) -> int:
        """The rank a waiting segment preempts with: partial aging does not count, the full
        boost (starving) does."""
        policy = self.ctx.policy
        if policy.ordering != "tier" or rank >= DELAYED_RANK or seg.id in self.starving:
            return rank
        return int(seg.tier)

    def charge(self, team: str, amount_tu: float) -> None:
        self.usage[team] = self.usage.get(team, 0.0) + amount_tu
        self._total_usage += amount_tu
        self._factors.clear()  # every team's share moved
        self._charges += 1

    def _level(self, team: str) -> float:
        if team == _ALL:
            return 0.0
        return fairshare.normalised_usage(self.usage.get(team, 0.0), team, self.ctx.policy)

    def fair_factor(self, team: str) -> float:
        """Fair share as an SRPT weight (`fair_share_mode="weight"`): the team's usage share
        over its entitlement (decayed usage, what its running segments hold, and what this
        round gave it), to the power `fair_weight_power`, times the median team's projected
        finish-time fairness over this team's (`ftf.team_rho`) to the power `ftf_weight_power`,
        clamped to `fair_weight_clamp`. Usage alone holds back a team that submits more than
        its share until its jobs finish far later than an equal share would let them; the
        second term gives them back their turn, and since it projects with the rate the team
        is getting, it also keeps SRPT aging from eroding the weights."""
        factor = self._factors.get(team)
        if factor is None:
            factor = self._factors[team] = self._fair_factor(team)
        return factor

    def _fair_factor(self, team: str) -> float:
        low, high = self.ctx.policy.fair_weight_clamp
        if self._total_usage <= 0:
            return low
        policy = self.ctx.policy
        share = max(0.0, self.usage.get(team, 0.0)) / self._total_usage
        entitled = self._weights.get(team, 1.0) / self._total_weight
        factor = (share / entitled) ** policy.fair_weight_power
        rho, reference = self._rho.get(team), self._rho.get(ftf.REFERENCE)
        if rho and reference:
            factor *= (reference / rho) ** policy.ftf_weight_power
        return min(max(factor, low), high)

    def _head(self, team: str, queue: _Run) -> tuple:
        """Heap key of a team's next segment: its level (turns) or weighted work (weight)."""
        if self.weighted:
            i = queue.head
            return (self._keys[i] * self.fair_factor(team), self._submitted[i],
                    self.segments[i].id)
        return (self._level(team),)

    def __iter__(self) -> Iterator[tuple[Segment, int]]:
        segments = self.segments
        while self._at < len(self._buckets):
            rank, queues = self._buckets[self._at]
            if self.weighted and len(queues) > 1:
                for i in self._weighted(queues):
                    yield segments[i], rank
            else:
                heap = [(self._head(t, q), t) for t, q in queues.items()]
                heapq.heapify(heap)
                while heap:
                    _, team = heapq.heappop(heap)
                    yield segments[queues[team].pop()], rank
                    if queues[team]:
                        heapq.heappush(heap, (self._head(team, queues[team]), team))
            self._at += 1

    def _weighted(self, queues: dict[str, _Run]) -> Iterator[int]:
        """Every team's factor moves when any team is charged: the heads are re-ranked after
        each charge (between charges only the team just taken from has a new head)."""
        live = {t: q for t, q in queues.items() if q}
        heap: list[tuple[tuple, str]] = []
        ranked_at = -1  # `_charges` when the heap was built
        while live:
            if ranked_at != self._charges:
                heap = [(self._head(t, q), t) for t, q in live.items()]
                heapq.heapify(heap)
                ranked_at = self._charges
            _, team = heapq.heappop(heap)
            yield live[team].pop()
            if not live[team]:
                del live[team]
            elif ranked_at == self._charges:  # else the heap is rebuilt before the next take
                heapq.heappush(heap, (self._head(team, live[team]), team))

    def unreached(self) -> np.ndarray:
        """Rows (in `segments`) of the segments iteration has not yielded yet (after it was
        left early)."""
        rest = (queue.rest() for _, queues in self._buckets[self._at:] for queue in queues.values())
        return np.fromiter(itertools.chain.from_iterable(rest), np.int64)


def _by_id_on_ties(order: np.ndarray, ids: list[str],
                   columns: tuple[np.ndarray, ...]) -> np.ndarray:
    """`order` with every run of equal `columns` values sorted by id (ties are rare: a sort
    of all 10,000 ids on every pass cost more than the rest of the sort)."""
    if len(order) < 2:
        return order
    tied = np.ones(len(order) - 1, bool)
    for column in columns:
        ordered = column[order]
        tied &= ordered[1:] == ordered[:-1]
    if not tied.any():
        return order
    order = order.tolist()
    starts = np.flatnonzero(tied & ~np.concatenate(([False], tied[:-1]))).tolist()
    for start in starts:
        end = start + 1
        while end < len(tied) and tied[end]:
            end += 1
        order[start:end + 1] = sorted(order[start:end + 1], key=ids.__getitem__)
    return np.array(order, np.int64)


class _Run:
    """A team's segments (indices) in key order, taken from the front."""

    __slots__ = ("_items", "_pos")

    def __init__(self, items: list[int]) -> None:
        self._items, self._pos = items, 0

    def __bool__(self) -> bool:
        return self._pos < len(self._items)

    @property
    def head(self) -> int:
        return self._items[self._pos]

    def pop(self) -> int:
        self._pos += 1
        return self._items[self._pos - 1]

    def rest(self) -> list[int]:
        return self._items[self._pos:]

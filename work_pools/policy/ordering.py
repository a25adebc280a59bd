"""The order in which waiting segments are considered, shared by `decide` and `eta`.

Segments are bucketed by (effective priority, not starving, yields-to-short);
buckets are taken most urgent first, so a starving segment goes ahead of every
other segment of its rank, whatever its team's usage. Inside a bucket, with
fair share on, the next segment comes from the team with the lowest weighted
usage: decayed TU, plus what its running segments will use in the next
`segment_s`, plus what was admitted earlier in this round (`charge`): that is
`fair_share_mode="turns"`. With SRPT and `fair_share_mode="weight"` (yoloq's
default) the teams share one queue per bucket and fair share enters as a weight
on remaining work (`fair_factors`). Inside a team: with `within_rank="srpt"` (yoloq's default) the least estimated remaining
work first (`remaining_work`: GPUs x remaining seconds, from measured epoch
times when known), aged by waiting (`srpt_key`); with "submit", submission
order. Ties: submission order, then id.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from work_pools.policy import fairshare, rules
from work_pools.policy.model import DELAYED_RANK, Policy, QuotaBreach, Snapshot, Segment
from work_pools.policy.priority import ranker, starvation_bound_s

_ALL = "*"  # the single queue used when fair share is off


@dataclass(frozen=True)
class Context:
    """Everything resolved once per call."""

    now: float
    policy: Policy
    breaches: tuple[QuotaBreach, ...]
    delayed_teams: frozenset[str]
    ranks: dict[str, int]  # segment id -> effective priority (running and waiting)
    ratios: dict[str, float]  # team -> usage share / entitlement
    usage: dict[str, float]  # team -> decayed TU + committed by running segments
    short_ranks: frozenset[int]  # ranks at which a short experiment is waiting


def build_context(snapshot: Snapshot, policy: Policy, now: float) -> Context:
    breaches = fairshare.quota_breaches(snapshot.team_period_tu, policy)
    delayed = frozenset(b.team for b in breaches)
    rank = ranker(now, policy)
    ranks = {s.id: rank(s, s.team in delayed) for s in (*snapshot.running, *snapshot.waiting)}
    teams = {s.team for s in snapshot.running} | {s.team for s in snapshot.waiting}
    ratios = fairshare.share_ratios(snapshot.team_usage_tu, teams, policy)
    usage = {t: snapshot.team_usage_tu.get(t, 0.0) for t in teams}
    speeds = {g.key: g.speed for g in snapshot.gpus}
    for seg in snapshot.running:
        speed = min((speeds.get((seg.node, i), 1.0) for i in seg.gpu_indices), default=1.0)
        usage[seg.team] += fairshare.tu(speed, policy.segment_s, seg.gpus)
    short_ranks = frozenset(ranks[s.id] for s in snapshot.waiting if rules.is_short(s))
    return Context(now, policy, breaches, delayed, ranks, ratios, usage, short_ranks)


def remaining_work(seg: Segment) -> float:
    """GPU-seconds (speed 1.0) the job still needs: measured epoch time x epochs left when
    the job has run an epoch, else the analysis estimate."""
    if seg.measured_epoch_s and seg.epochs:
        seconds = seg.measured_epoch_s * max(seg.epochs - seg.epoch, 0)
    else:
        seconds = seg.est_remaining_s
    return seg.gpus * seconds


def srpt_key(seg: Segment, now: float, policy: Policy) -> float:
    """Shortest remaining work first, aged: the work shrinks by a factor 1 + waited /
    `srpt_aging_s`, so a long job that waits overtakes new short work eventually (and
    the starvation bound of `priority` still applies on top)."""
    return srpt_keyer(now, policy)(seg)


def srpt_keyer(now: float, policy: Policy) -> Callable[[Segment], float]:
    """`srpt_key` with the policy resolved once (a pass keys every waiting segment)."""
    aging_s = policy.srpt_aging_s

    def key(seg: Segment) -> float:
        aging = 1.0 + max(0.0, now - seg.waiting_since) / aging_s if aging_s > 0 else 1.0
        return remaining_work(seg) / aging

    return key


class FairQueue:
    """Iterate waiting segments in policy order; `charge` a team for what it was given."""

    def __init__(self, waiting: tuple[Segment, ...], ctx: Context) -> None:
        self.ctx = ctx
        self.segments = waiting
        self.usage = dict(ctx.usage)
        self.yielding: set[str] = set()
        self.starving: set[str] = set()
        policy, now, ranks, short_ranks = ctx.policy, ctx.now, ctx.ranks, ctx.short_ranks
        srpt = policy.within_rank == "srpt" and policy.ordering == "tier"
        self.weighted = srpt and policy.fair_share and policy.fair_share_mode == "weight"
        fair = policy.fair_share
        teams = {s.team for s in waiting} | set(self.usage)
        self._weights = {t: policy.weight(t) for t in teams}
        self._total_weight = sum(self._weights.values()) or 1.0
        self._total_usage = sum(max(0.0, self.usage.get(t, 0.0)) for t in teams)
        seventy = rules.long_job_rule_on(policy) and bool(short_ranks)
        aging = policy.ordering == "tier" and policy.aging_step_s > 0
        bound = starvation_bound_s(policy)
        keyer = srpt_keyer(now, policy) if srpt else None
        buckets: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for seg in waiting:
            rank = ranks[seg.id]
            yields = seventy and rank in short_ranks and rules.yields_to_short(seg, True, policy)
            if yields:
                self.yielding.add(seg.id)
            starving = aging and seg.started_at is None and now - seg.waiting_since >= bound
            if starving:
                self.starving.add(seg.id)
            key = (keyer(seg) if keyer else 0.0, seg.submitted_at, seg.id)
            buckets[(rank, not starving, yields)][seg.team if fair else _ALL].append((key, seg))
        self.buckets = buckets

    def preemption_rank(self, seg: Segment, rank: int) -> int:
        """`priority.preemption_rank`, from what this queue already resolved."""
        policy = self.ctx.policy
        if policy.ordering != "tier" or rank >= DELAYED_RANK or seg.id in self.starving:
            return rank
        return int(seg.tier)

    def charge(self, team: str, amount_tu: float) -> None:
        self.usage[team] = self.usage.get(team, 0.0) + amount_tu
        self._total_usage += amount_tu

    def _level(self, team: str) -> float:
        if team == _ALL:
            return 0.0
        return fairshare.normalised_usage(self.usage.get(team, 0.0), team, self.ctx.policy)

    def fair_factor(self, team: str) -> float:
        """Fair share as an SRPT weight (`fair_share_mode="weight"`): the team's usage share
        over its entitlement (decayed usage, what its running segments hold, and what this
        round gave it), to the power `fair_weight_power`, clamped to `fair_weight_clamp`.
        With power 3, a team at 1.26 times its share sees its jobs' remaining work doubled."""
        low, high = self.ctx.policy.fair_weight_clamp
        if self._total_usage <= 0:
            return low
        share = max(0.0, self.usage.get(team, 0.0)) / self._total_usage
        entitled = self._weights.get(team, 1.0) / self._total_weight
        return min(max((share / entitled) ** self.ctx.policy.fair_weight_power, low), high)

    def _head(self, team: str, queue: _Lazy) -> tuple:
        """Heap key of a team's next segment: its level (turns) or weighted work (weight)."""
        if self.weighted:
            key = queue[0][0]
            return (key[0] * self.fair_factor(team), key[1], key[2])
        return (self._level(team),)

    def __iter__(self) -> Iterator[tuple[Segment, int]]:
        for (rank, *_), teams in sorted(self.buckets.items()):
            queues = {t: _Lazy(list(items)) for t, items in teams.items()}
            if self.weighted and len(queues) > 1:
                yield from self._weighted(queues, rank)
                continue
            heap = [(self._head(t, q), t) for t, q in queues.items()]
            heapq.heapify(heap)
            while heap:
                _, team = heapq.heappop(heap)
                yield queues[team].popleft()[1], rank
                if queues[team]:
                    heapq.heappush(heap, (self._head(team, queues[team]), team))


    def _weighted(self, queues: dict[str, _Lazy], rank: int) -> Iterator[tuple[Segment, int]]:
        """Every team's factor moves when any team is charged: re-rank the heads each time."""
        while queues:
            team = min(queues, key=lambda t: (self._head(t, queues[t]), t))
            yield queues[team].popleft()[1], rank
            if not queues[team]:
                del queues[team]


class _Lazy:
    """A team's segments in key order, sorted only as far as they are taken: a pass usually
    stops after a few hundred of thousands (every GPU taken, nobody left to preempt)."""

    def __init__(self, items: list[tuple]) -> None:
        heapq.heapify(items)  # keys are unique (they end with the segment id)
        self._items = items

    def __bool__(self) -> bool:
        return bool(self._items)

    def __getitem__(self, index: int) -> tuple:
        if index != 0:
            raise IndexError("only the head of a lazy queue can be read")
        return self._items[0]

    def popleft(self) -> tuple:
        return heapq.heappop(self._items)

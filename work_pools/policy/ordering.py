"""The order in which waiting segments are considered, shared by `decide` and `eta`.

Segments are bucketed by (effective priority, not starving, yields-to-short);
buckets are taken most urgent first, so a starving segment goes ahead of every
other segment of its rank, whatever its team's usage. Inside a bucket, with
fair share on, the next segment comes from the team with the lowest weighted
usage: decayed TU, plus what its running segments will use in the next
`segment_s`, plus what was admitted earlier in this round (`charge`). Inside a
team: submission order, then id.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass

from work_pools.policy import fairshare, rules
from work_pools.policy.model import Policy, QuotaBreach, Snapshot, Segment
from work_pools.policy.priority import effective_priority, is_starving

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
    ranks = {s.id: effective_priority(s, now, policy, delayed=s.team in delayed)
             for s in (*snapshot.running, *snapshot.waiting)}
    teams = {s.team for s in (*snapshot.running, *snapshot.waiting)}
    ratios = fairshare.share_ratios(snapshot.team_usage_tu, teams, policy)
    usage = {t: snapshot.team_usage_tu.get(t, 0.0) for t in teams}
    speeds = {g.index: g.speed for g in snapshot.gpus}
    for seg in snapshot.running:
        speed = min((speeds.get(i, 1.0) for i in seg.gpu_indices), default=1.0)
        usage[seg.team] += fairshare.tu(speed, policy.segment_s, seg.gpus)
    short_ranks = frozenset(ranks[s.id] for s in snapshot.waiting if rules.is_short(s))
    return Context(now, policy, breaches, delayed, ranks, ratios, usage, short_ranks)


class FairQueue:
    """Iterate waiting segments in policy order; `charge` a team for what it was given."""

    def __init__(self, waiting: tuple[Segment, ...], ctx: Context) -> None:
        self.ctx = ctx
        self.usage = dict(ctx.usage)
        self.yielding: set[str] = set()
        buckets: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for seg in waiting:
            rank = ctx.ranks[seg.id]
            yields = rules.yields_to_short(seg, rank in ctx.short_ranks, ctx.policy)
            if yields:
                self.yielding.add(seg.id)
            team = seg.team if ctx.policy.fair_share else _ALL
            starving = is_starving(seg, ctx.now, ctx.policy)
            buckets[(rank, not starving, yields)][team].append(((seg.submitted_at, seg.id), seg))
        self.buckets = buckets

    def charge(self, team: str, amount_tu: float) -> None:
        self.usage[team] = self.usage.get(team, 0.0) + amount_tu

    def _level(self, team: str) -> float:
        if team == _ALL:
            return 0.0
        return fairshare.normalised_usage(self.usage.get(team, 0.0), team, self.ctx.policy)

    def __iter__(self) -> Iterator[tuple[Segment, int]]:
        for (rank, *_), teams in sorted(self.buckets.items()):
            queues = {t: deque(seg for _, seg in sorted(items)) for t, items in teams.items()}
            heap = [(self._level(t), t) for t in queues]
            heapq.heapify(heap)
            while heap:
                _, team = heapq.heappop(heap)
                yield queues[team].popleft(), rank
                if queues[team]:
                    heapq.heappush(heap, (self._level(team), team))

"""Discrete-event replay of a trace through `decide`, in simulated time.

Events: arrivals, completions, and segment boundaries on a global grid every
`segment_s` (all running segments end there; each job's next segment waits and
the policy decides again, as the worker does). A preemption between boundaries
stops the victim at once and loses its work since the last checkpoint (epoch
boundary, an epoch = duration / epochs); a boundary itself checkpoints. The
scheduler sees estimated durations (true x lognormal(0, `estimate_sigma`)),
completions follow the true ones. Gangs take `gpus` GPUs and run at the
slowest one's speed.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from work_pools.policy import fairshare
from work_pools.policy.decide import decide
from work_pools.policy.eta import Eta, estimate
from work_pools.policy.model import Gpu, Policy, Segment, Snapshot
from work_pools.simulate.trace import TraceJob

_EPS = 1e-6


@dataclass
class JobRun:
    """A job's life in the simulation (mutable: this is the simulator's own state)."""

    spec: TraceJob
    est_duration_s: float
    done_s: float = 0.0  # reference seconds of work done
    gpus_held: tuple[int, ...] = ()
    speed: float = 0.0
    run_start: float = 0.0
    waiting_since: float = 0.0
    segment_no: int = 0
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    redone_gpu_s: float = 0.0
    run_s: float = 0.0
    speed_s: float = 0.0  # integral of speed over run time (for the mean speed)
    attained_gpu_s: float = 0.0
    held: deque = field(default_factory=deque)  # (start, end) intervals holding a GPU
    eta: Eta | None = None
    segment: Segment | None = None  # cached waiting segment

    @property
    def epoch_s(self) -> float:
        return self.spec.duration_s / self.spec.epochs

    @property
    def id(self) -> str:
        return self.spec.job_id


@dataclass
class SimResult:
    jobs: list[JobRun]
    gpus: tuple[Gpu, ...]
    policy: Policy
    busy_gpu_s: float
    team_tu: dict[str, float]
    unschedulable: list[str]


class Simulator:
    def __init__(self, trace: list[TraceJob], gpus: tuple[Gpu, ...], policy: Policy, *,
                 segment_s: float = 600.0, estimate_sigma: float = 0.5, seed: int = 0,
                 eta: bool = True) -> None:
        if not (math.isfinite(segment_s) and segment_s > 0):
            raise ValueError(f"segment_s must be a positive number of seconds, not {segment_s}")
        self.gpus = gpus
        self.policy = policy
        self.segment_s = segment_s
        self.with_eta = eta
        rng = random.Random(seed)
        self.jobs = [JobRun(j, j.duration_s * math.exp(rng.gauss(0, estimate_sigma)))
                     for j in sorted(trace, key=lambda j: (j.submit_time, j.job_id))]
        self.by_id = {j.id: j for j in self.jobs}
        self.speeds = {g.index: g.speed for g in gpus}
        self.running: dict[str, JobRun] = {}
        self.waiting: dict[str, JobRun] = {}
        self.ledger = fairshare.UsageLedger()
        self.busy_gpu_s = 0.0
        self.team_tu: dict[str, float] = {}
        self.unschedulable: list[str] = []
        self.now = 0.0

    # -- main loop --------------------------------------------------------
    def run(self, until: float = math.inf) -> SimResult:
        """Replay the trace to the end (or stop at simulated time `until`)."""
        pending = deque(self.jobs)
        self.now = pending[0].spec.submit_time if pending else 0.0
        while pending or self.running or self.waiting:
            t = min(self._next_arrival(pending), self._next_completion(), self._next_boundary())
            if t > until:
                self._advance(until)
                break
            if math.isinf(t):
                self.unschedulable = sorted(self.waiting)
                break
            self._advance(t)
            self._complete()
            if self.running and abs(t - self._boundary_at(t)) < _EPS:
                self._boundary()
            arrived = []
            while pending and pending[0].spec.submit_time <= t + _EPS:
                job = pending.popleft()
                self._enqueue(job, job.spec.submit_time)
                arrived.append(job.id)
            self._schedule(arrived)
        return SimResult(self.jobs, self.gpus, self.policy, self.busy_gpu_s, self.team_tu,
                         self.unschedulable)

    def _next_arrival(self, pending: deque) -> float:
        return pending[0].spec.submit_time if pending else math.inf

    def _next_completion(self) -> float:
        return min((j.run_start + (j.spec.duration_s - j.done_s) / j.speed
                    for j in self.running.values()), default=math.inf)

    def _boundary_at(self, t: float) -> float:
        return round(t / self.segment_s) * self.segment_s

    def _next_boundary(self) -> float:
        if not self.running:
            return math.inf
        return (math.floor(self.now / self.segment_s + _EPS) + 1) * self.segment_s

    # -- time passing -------------------------------------------------------
    def _advance(self, t: float) -> None:
        dt = t - self.now
        charges: dict[str, float] = {}
        for job in self.running.values():
            used = fairshare.tu(sum(self.speeds[i] for i in job.gpus_held), dt)
            charges[job.spec.team] = charges.get(job.spec.team, 0.0) + used
            self.busy_gpu_s += dt * len(job.gpus_held)
        for team, used in charges.items():
            self.team_tu[team] = self.team_tu.get(team, 0.0) + used
        self.ledger = fairshare.charge(self.ledger, charges, t, self.policy)
        self.now = t

    def _progress(self, job: JobRun) -> float:
        return job.done_s + (self.now - job.run_start) * job.speed

    def _stop(self, job: JobRun) -> None:
        """End the job's current run at `now`, crediting its work."""
        wall = self.now - job.run_start
        job.done_s = self._progress(job)
        job.run_s += wall
        job.speed_s += wall * job.speed
        job.attained_gpu_s += wall * len(job.gpus_held)
        job.held.append((job.run_start, self.now))
        job.gpus_held = ()
        del self.running[job.id]

    def _complete(self) -> None:
        for job in [j for j in self.running.values()
                    if self._progress(j) >= j.spec.duration_s - 1e-3]:
            self._stop(job)
            job.finish = self.now

    def _boundary(self) -> None:
        for job in list(self.running.values()):
            self._stop(job)
            self._enqueue(job, self.now)

    def _enqueue(self, job: JobRun, since: float) -> None:
        job.waiting_since = since
        job.segment_no += 1
        job.segment = None
        self.waiting[job.id] = job

    # -- deciding ------------------------------------------------------------
    def _schedule(self, arrived: list[str]) -> None:
        for attempt in range(8):
            snapshot = self._snapshot()
            decision = decide(snapshot, self.policy, self.now)
            if attempt == 0 and arrived and self.with_eta:
                self._record_eta(snapshot, arrived)
            for p in decision.preempt:
                self._preempt(self.running[p.job_id])
            for a in decision.admit:
                self._start(self.waiting.pop(a.job_id), a.gpu_indices)
            if not decision.preempt:
                return

    def _record_eta(self, snapshot: Snapshot, arrived: list[str]) -> None:
        ids = {self.waiting[j].segment.id for j in arrived if j in self.waiting}
        for sid, eta in estimate(snapshot, self.policy, self.now, only=ids).items():
            if sid in ids:
                self.by_id[sid.rsplit("/", 1)[0]].eta = eta

    def _preempt(self, job: JobRun) -> None:
        progress = self._progress(job)
        checkpoint = max(job.done_s, math.floor(progress / job.epoch_s + 1e-9) * job.epoch_s)
        lost = progress - checkpoint
        gpus = len(job.gpus_held)
        self._stop(job)
        job.done_s = checkpoint
        job.redone_gpu_s += lost / job.speed * gpus
        job.preemptions += 1
        self._enqueue(job, self.now)

    def _start(self, job: JobRun, indices: tuple[int, ...]) -> None:
        job.gpus_held = tuple(indices)
        job.speed = min(self.speeds[i] for i in indices)
        job.run_start = self.now
        if job.first_start is None:
            job.first_start = self.now
        self.running[job.id] = job

    # -- snapshots -------------------------------------------------------------
    def _snapshot(self) -> Snapshot:
        free = {g.index: g.mem_total_gb for g in self.gpus}
        running = []
        for job in self.running.values():
            for i in job.gpus_held:
                free[i] -= job.spec.gpu_mem_gb
            running.append(self._running_segment(job))
        gpus = tuple(Gpu(g.index, g.name, g.mem_total_gb, free[g.index], g.speed, g.uuid)
                     for g in self.gpus)
        waiting = tuple(self._waiting_segment(j) for j in self.waiting.values())
        return Snapshot(gpus, tuple(running), waiting, self.ledger.decayed_tu,
                        self.ledger.period_tu)

    def _base_segment(self, job: JobRun, done: float) -> Segment:
        spec = job.spec
        return Segment(
            id=f"{spec.job_id}/{job.segment_no}", job_id=spec.job_id, team=spec.team,
            tier=spec.tier, submitted_at=spec.submit_time, waiting_since=job.waiting_since,
            est_mem_gb=spec.gpu_mem_gb, gpus=spec.gpus, job_class=spec.klass,
            est_remaining_s=max(job.est_duration_s - done, 0.1 * job.est_duration_s, 60.0),
            epoch=int(done / job.epoch_s + 1e-9), epochs=spec.epochs,
            attained_gpu_s=job.attained_gpu_s, held_window_s=self._held_in_window(job))

    def _waiting_segment(self, job: JobRun) -> Segment:
        if job.segment is None:
            job.segment = self._base_segment(job, job.done_s)
        return job.segment

    def _running_segment(self, job: JobRun) -> Segment:
        progress = self._progress(job)
        checkpoint = max(job.done_s, math.floor(progress / job.epoch_s + 1e-9) * job.epoch_s)
        since_checkpoint = progress - checkpoint
        seg = self._base_segment(job, progress)
        attained = job.attained_gpu_s + (self.now - job.run_start) * len(job.gpus_held)
        return Segment(**{**seg.__dict__, "gpu_indices": job.gpus_held,
                          "started_at": job.run_start, "attained_gpu_s": attained,
                          "last_checkpoint_at": self.now - since_checkpoint / job.speed})

    def _held_in_window(self, job: JobRun) -> float:
        start = self.now - self.policy.long_job_window_s
        while job.held and job.held[0][1] <= start:
            job.held.popleft()
        return sum(min(e, self.now) - max(s, start) for s, e in job.held if e > start)


def simulate(trace: list[TraceJob], gpus: tuple[Gpu, ...], policy: Policy, *,
             until: float = math.inf, **options) -> SimResult:
    return Simulator(trace, gpus, policy, **options).run(until)

"""Discrete-event replay of a trace through `decide`, in simulated time.

Events: arrivals, completions, and segment boundaries on a global grid every
`segment_s` (all running segments end there; each job's next segment waits and
the policy decides again, as the worker does). A preemption between boundaries
stops the victim at once and loses its work since the last checkpoint (epoch
boundary, an epoch = duration / epochs); a boundary itself checkpoints. The
scheduler sees estimated durations (true x lognormal(0, `estimate_sigma`)),
completions follow the true ones. Gangs take `gpus` GPUs and run at the
slowest one's speed.

Also measured: the number of jobs in the system over time (Themis' N), GPU
time left idle while a waiting job would have fitted on free GPUs (a
work-conservation check), and, with soft preemption, throttles: the urgent
job starts at the victim's next epoch boundary on the victim's GPU and both
run at half the GPU's speed until one of them stops (the simulator's model of
two jobs sharing one GPU's compute).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from work_pools.policy import fairshare
from work_pools.policy.decide import decide
from work_pools.policy.model import Gpu, Policy, Segment, Snapshot, Throttle
from work_pools.simulate.etas import EtaTracker
from work_pools.simulate.jobrun import BATCH, JobRun, memory_model
from work_pools.simulate.sharing import Sharing
from work_pools.simulate.trace import TraceJob

_EPS = 1e-6


@dataclass
class SimResult:
    jobs: list[JobRun]
    gpus: tuple[Gpu, ...]
    policy: Policy
    busy_gpu_s: float
    team_tu: dict[str, float]
    unschedulable: list[str]
    idle_while_waiting_gpu_s: float = 0.0  # free GPUs a waiting job would have fitted
    throttles: int = 0
    busy_by_hour: list[float] = field(default_factory=list)  # busy GPU-seconds in each hour


class Simulator(Sharing):
    def __init__(self, trace: list[TraceJob], gpus: tuple[Gpu, ...], policy: Policy, *,
                 segment_s: float = 600.0, estimate_sigma: float = 0.5, seed: int = 0,
                 eta: bool = True, calibrate: bool = True) -> None:
        if not (math.isfinite(segment_s) and segment_s > 0):
            raise ValueError(f"segment_s must be a positive number of seconds, not {segment_s}")
        self.gpus = gpus
        self.policy = policy
        self.segment_s = segment_s
        self.with_eta = eta
        self.etas = EtaTracker(policy, len(gpus), calibrate=calibrate)
        self.in_system_s = 0.0  # integral of (running + waiting jobs) dt
        self.idle_while_waiting_gpu_s = 0.0
        self._idle_fit = 0  # free GPUs a waiting job fits on, since the last decision
        self.deferred: list[tuple[float, Throttle]] = []  # throttled starts, by time
        self.throttles = 0
        rng = random.Random(seed)
        self.jobs = [JobRun(j, j.duration_s * math.exp(rng.gauss(0, estimate_sigma)))
                     for j in sorted(trace, key=lambda j: (j.submit_time, j.job_id))]
        self.by_id = {j.id: j for j in self.jobs}
        self.slot_of = {g.key: n for n, g in enumerate(gpus)}
        self.speeds = {n: g.speed for n, g in enumerate(gpus)}
        self.running: dict[str, JobRun] = {}
        self.waiting: dict[str, JobRun] = {}
        self.ledger = fairshare.UsageLedger()
        self.busy_gpu_s = 0.0
        self.busy_by_hour: list[float] = []
        self.team_tu: dict[str, float] = {}
        self.unschedulable: list[str] = []
        self.now = 0.0

    # -- main loop --------------------------------------------------------
    def run(self, until: float = math.inf) -> SimResult:
        """Replay the trace to the end (or stop at simulated time `until`)."""
        pending = deque(self.jobs)
        self.now = pending[0].spec.submit_time if pending else 0.0
        while pending or self.running or self.waiting or self.deferred:
            t = min(self._next_arrival(pending), self._next_completion(), self._next_boundary(),
                    self._next_deferred())
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
            self._start_deferred()
            arrived = []
            while pending and pending[0].spec.submit_time <= t + _EPS:
                job = pending.popleft()
                job.in_system_at_submit = self.in_system_s
                self._enqueue(job, job.spec.submit_time)
                self.etas.arrived(t, int(job.spec.tier), job.spec.gpus * job.est_duration_s)
                arrived.append(job.id)
            self._schedule(arrived)
            self._idle_fit = self._free_gpus_a_waiting_job_fits()
        return SimResult(self.jobs, self.gpus, self.policy, self.busy_gpu_s, self.team_tu,
                         self.unschedulable, self.idle_while_waiting_gpu_s, self.throttles,
                         self.busy_by_hour)

    def _next_arrival(self, pending: deque) -> float:
        return pending[0].spec.submit_time if pending else math.inf

    def _next_completion(self) -> float:
        return min((j.run_start + (j.spec.duration_s - j.done_s) / j.speed
                    for j in self.running.values() if j.speed > 0), default=math.inf)

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
        self.in_system_s += dt * (len(self.running) + len(self.waiting) + len(self.deferred))
        self.idle_while_waiting_gpu_s += dt * self._idle_fit
        busy: set[int] = set()
        for job in self.running.values():
            share = 0.5 if job.sharing_with else 1.0
            used = fairshare.tu(sum(self.speeds[i] for i in job.gpus_held) * share, dt)
            charges[job.spec.team] = charges.get(job.spec.team, 0.0) + used
            busy.update(job.gpus_held)
        self.busy_gpu_s += dt * len(busy)
        self._busy_per_hour(self.now, t, len(busy))
        for team, used in charges.items():
            self.team_tu[team] = self.team_tu.get(team, 0.0) + used
        self.ledger = fairshare.charge(self.ledger, charges, t, self.policy)
        self.now = t

    def _busy_per_hour(self, start: float, end: float, busy: int) -> None:
        """Spread `busy` GPUs over [start, end) into hourly buckets (the utilisation curve)."""
        while start < end:
            hour = int(start // 3600)
            stop = min(end, (hour + 1) * 3600.0)
            while len(self.busy_by_hour) <= hour:
                self.busy_by_hour.append(0.0)
            self.busy_by_hour[hour] += (stop - start) * busy
            start = stop

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
        job.last_gpus, job.last_stop = job.gpus_held, self.now
        job.gpus_held = ()
        del self.running[job.id]
        self._unshare(job)

    def _complete(self) -> None:
        for job in [j for j in self.running.values()
                    if self._progress(j) >= j.spec.duration_s - 1e-3]:
            self._stop(job)
            job.finish = self.now
            job.in_system_at_finish = self.in_system_s

    def _boundary(self) -> None:
        for job in list(self.running.values()):
            if job.id in self.running:
                self._stop(job)
                job.batch = BATCH  # a throttle lasts until the segment ends
                self._enqueue(job, self.now)

    def _enqueue(self, job: JobRun, since: float) -> None:
        job.waiting_since = since
        job.segment_no += 1
        job.segment = None
        self.waiting[job.id] = job

    # -- deciding ------------------------------------------------------------
    def _schedule(self, arrived: list[str]) -> None:
        """Decide until nothing more is preempted (a preemption frees GPUs at once here)."""
        while True:
            snapshot = self._snapshot()
            decision = decide(snapshot, self.policy, self.now)
            if arrived and self.with_eta:
                self._record_eta(snapshot, arrived)
                arrived = []
            for p in decision.preempt:
                self._preempt(self.running[p.job_id])
            for a in decision.admit:
                slots = tuple(self.slot_of[(a.node, i)] for i in a.gpu_indices)
                self._start(self.waiting.pop(a.job_id), slots)
            for throttle in decision.throttle:
                self._defer(throttle)
            if not decision.preempt:
                return

    def _record_eta(self, snapshot: Snapshot, arrived: list[str]) -> None:
        ids = {self.waiting[j].segment.id for j in arrived if j in self.waiting}
        for sid, prediction in self.etas.predict(snapshot, self.now, ids).items():
            job = self.by_id[sid.rsplit("/", 1)[0]]
            job.eta, job.eta_raw = prediction.calibrated, prediction.raw

    def _free_gpus_a_waiting_job_fits(self) -> int:
        """Free GPUs, if some waiting job fits on free GPUs of one node now; else 0."""
        held = {i for j in self.running.values() for i in j.gpus_held}
        held |= {self.slot_of[(t.node, t.gpu_index)] for _, t in self.deferred}
        free = [n for n in range(len(self.gpus)) if n not in held]
        if not free or not self.waiting:
            return 0
        for job in self.waiting.values():
            fitting = [n for n in free if self.gpus[n].mem_total_gb >= job.spec.gpu_mem_gb]
            nodes: dict[str, int] = {}
            for n in fitting:
                nodes[self.gpus[n].node] = nodes.get(self.gpus[n].node, 0) + 1
            if any(c >= job.spec.gpus for c in nodes.values()):
                return len(free)
        return 0

    def _preempt(self, job: JobRun) -> None:
        progress = self._progress(job)
        checkpoint = max(job.done_s, math.floor(progress / job.epoch_s + 1e-9) * job.epoch_s)
        lost = progress - checkpoint
        gpus = len(job.gpus_held)
        self._stop(job)
        job.last_stop = None  # a preempted job's hold ends here
        job.done_s = checkpoint
        job.redone_gpu_s += lost / job.speed * gpus
        job.preemptions += 1
        job.batch = BATCH
        self._enqueue(job, self.now)

    def _start(self, job: JobRun, indices: tuple[int, ...]) -> None:
        job.gpus_held = tuple(indices)
        job.speed = min(self.speeds[i] for i in indices)
        continued = job.last_stop is not None and abs(job.last_stop - self.now) < _EPS \
            and set(job.last_gpus) == set(indices)
        if not continued:
            job.held_since = self.now
        job.run_start = job.started_seg_at = self.now
        if job.first_start is None:
            job.first_start = self.now
            self.etas.started(job.id, self.now)
        self.running[job.id] = job

    # -- snapshots -------------------------------------------------------------
    def _snapshot(self) -> Snapshot:
        free = [g.mem_total_gb for g in self.gpus]
        running = []
        for job in self.running.values():
            for i in job.gpus_held:
                free[i] -= job.mem_gb
            running.append(self._running_segment(job))
        for _, throttle in self.deferred:  # memory promised to a throttled start
            free[self.slot_of[(throttle.node, throttle.gpu_index)]] -= \
                self.by_id[throttle.for_job_id].mem_gb
        gpus = tuple(Gpu(g.index, g.name, g.mem_total_gb, free[n], g.speed, g.uuid, g.node)
                     for n, g in enumerate(self.gpus))
        waiting = tuple(self._waiting_segment(j) for j in self.waiting.values())
        return Snapshot(gpus, tuple(running), waiting, self.ledger.decayed_tu,
                        self.ledger.period_tu)

    def _base_segment(self, job: JobRun, done: float) -> Segment:
        spec = job.spec
        fixed, per_image = memory_model(spec.gpu_mem_gb)
        return Segment(
            id=f"{spec.job_id}/{job.segment_no}", job_id=spec.job_id, team=spec.team,
            tier=spec.tier, submitted_at=spec.submit_time, waiting_since=job.waiting_since,
            est_mem_gb=spec.gpu_mem_gb, gpus=spec.gpus, job_class=spec.klass,
            est_remaining_s=max(job.est_duration_s - done, 0.1 * job.est_duration_s, 60.0),
            epoch=int(done / job.epoch_s + 1e-9), epochs=spec.epochs,
            attained_gpu_s=job.attained_gpu_s, held_window_s=self._held_in_window(job),
            batch=job.batch, mem_per_image_gb=per_image, fixed_mem_gb=fixed,
            measured_epoch_s=self._measured_epoch_s(job, done))

    def _measured_epoch_s(self, job: JobRun, done: float) -> float | None:
        """After the first epoch the worker knows the job's real epoch time (at speed 1.0)."""
        return job.epoch_s if done >= job.epoch_s - 1e-6 else None

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
        first = self.gpus[job.gpus_held[0]]
        indices = tuple(self.gpus[i].index for i in job.gpus_held)
        return replace(seg, gpu_indices=indices, node=first.node, est_mem_gb=job.mem_gb,
                       started_at=job.started_seg_at, attained_gpu_s=attained,
                       held_since=job.held_since,
                       last_checkpoint_at=self.now - since_checkpoint / job.speed)

    def _held_in_window(self, job: JobRun) -> float:
        start = self.now - self.policy.long_job_window_s
        while job.held and job.held[0][1] <= start:
            job.held.popleft()
        return sum(min(e, self.now) - max(s, start) for s, e in job.held if e > start)


def simulate(trace: list[TraceJob], gpus: tuple[Gpu, ...], policy: Policy, *,
             until: float = math.inf, **options) -> SimResult:
    return Simulator(trace, gpus, policy, **options).run(until)

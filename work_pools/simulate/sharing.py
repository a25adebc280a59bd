"""Soft preemption in the simulator: throttled starts and GPU sharing.

A `Throttle` from `decide` defers the urgent job to the victim's next epoch
boundary; then the victim's batch drops and both run at half the GPU's speed
until one of them stops (a segment boundary at the latest), when the other is
back to full speed. Mixed into `engine.Simulator`.
"""

from __future__ import annotations

import math

from work_pools.policy.model import Throttle
from work_pools.simulate.jobrun import JobRun

_EPS = 1e-6


class Sharing:
    """Methods of `Simulator` for throttles (it provides running, waiting, by_id, ...)."""

    def _next_deferred(self) -> float:
        return self.deferred[0][0] if self.deferred else math.inf

    def _defer(self, throttle: Throttle) -> None:
        """Start the urgent job on the victim's GPU at the victim's next epoch boundary."""
        victim = self.running[throttle.victim_job_id]
        progress = self._progress(victim)
        boundary = math.ceil(progress / victim.epoch_s - 1e-9) * victim.epoch_s
        at = self.now + max(0.0, boundary - progress) / victim.speed
        self.waiting.pop(throttle.for_job_id)
        self.deferred.append((at, throttle))
        self.deferred.sort(key=lambda d: (d[0], d[1].for_job_id))
        self.throttles += 1

    def _start_deferred(self) -> None:
        while self.deferred and self.deferred[0][0] <= self.now + _EPS:
            _, throttle = self.deferred.pop(0)
            job = self.by_id[throttle.for_job_id]
            slot = self.slot_of[(throttle.node, throttle.gpu_index)]
            victim = self.running.get(throttle.victim_job_id)
            if victim is not None and slot in victim.gpus_held and not victim.sharing_with:
                victim.batch = throttle.new_batch
                victim.throttled += 1
                self._rebase(victim, victim.speed * 0.5)
                self._start(job, (slot,))
                self._rebase(job, job.speed * 0.5)
                job.sharing_with, victim.sharing_with = victim.id, job.id
            elif not any(slot in j.gpus_held for j in self.running.values()):
                self._start(job, (slot,))
            else:
                self._enqueue(job, self.now)

    def _rebase(self, job: JobRun, speed: float) -> None:
        """Credit the work done so far and continue at `speed` (a throttle began or ended)."""
        wall = self.now - job.run_start
        job.done_s = self._progress(job)
        job.run_s += wall
        job.speed_s += wall * job.speed
        job.attained_gpu_s += wall * len(job.gpus_held)
        job.held.append((job.run_start, self.now))
        job.run_start, job.speed = self.now, speed

    def _unshare(self, job: JobRun) -> None:
        other = self.by_id.get(job.sharing_with) if job.sharing_with else None
        job.sharing_with = None
        if other is not None and other.id in self.running:
            other.sharing_with = None
            self._rebase(other, min(self.speeds[i] for i in other.gpus_held))

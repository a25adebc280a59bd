"""The epoch ledger a segment keeps: one row per epoch it trains (job, epoch, segment,
node, start, end), appended to the rows of the job's newest checkpoint metadata and
saved with every checkpoint. Rows are never dropped, so a retrained epoch shows twice.
Read it back with `yoloq.records.jobs.epoch_trainings(job_id)`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable

from blocks.checkpoint_base import EpochRecord
from yoloq.base.names import node_name


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class EpochLedger:
    def __init__(self, job_id: str, segment: str, prior: Iterable[EpochRecord] = ()) -> None:
        self.job_id, self.segment, self.node = job_id, segment, node_name()
        self._rows = list(prior)
        self._started: dict[int, str] = {}

    def start(self, epoch: int) -> None:
        self._started[epoch] = _now()

    def end(self, epoch: int) -> None:
        end = _now()
        self._rows.append(EpochRecord(job_id=self.job_id, epoch=epoch, segment=self.segment,
                                      node=self.node, start=self._started.pop(epoch, end),
                                      end=end))

    @property
    def records(self) -> tuple[EpochRecord, ...]:
        return tuple(self._rows)

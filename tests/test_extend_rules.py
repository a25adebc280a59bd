"""When a finished checkpoint is done and when `yoloq extend` makes it train on: the one rule
the parent flow, the segment and the service layer read (`CheckpointInfo.done_for`)."""

from __future__ import annotations

import pytest

from blocks.checkpoint_base import CheckpointInfo


def _info(epoch: int, finished: bool, target: int) -> CheckpointInfo:
    return CheckpointInfo(job_id="j", epoch=epoch, sha256="0" * 64, size=1, key="j/x",
                          created_at="2026-12-06T00:00:00Z", finished=finished, target_epochs=target)


@pytest.mark.parametrize("epoch, finished, target, epochs, done, extended", [
    (3, True, 3, 3, True, False),    # finished at its total
    (3, True, 3, 5, False, True),    # finished at its total, since extended: trains on
    (2, True, 5, 5, True, False),    # early-stopped: done, whatever the total
    (2, True, 5, 8, True, False),    # early-stopped, then extended: still done (the service refuses)
    (3, True, 0, 5, True, False),    # an older release recorded no total: done
    (3, False, 5, 5, False, False),  # mid-training
])
def test_done_for_and_extended_to(epoch, finished, target, epochs, done, extended):
    info = _info(epoch, finished, target)
    assert info.done_for(epochs) is done
    assert info.extended_to(epochs) is extended


def test_the_total_survives_the_metadata_round_trip():
    info = _info(3, True, 3)
    again = CheckpointInfo.from_json(info.to_json())
    assert again.target_epochs == 3 and again.extended_to(4)
    legacy = info.to_json().replace(b'"target_epochs": 3', b'"x": 0')
    assert CheckpointInfo.from_json(legacy).target_epochs == 0

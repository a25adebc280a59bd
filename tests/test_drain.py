"""`yoloq down`'s drain, the parts that need no stack: the request and report files, the
bound, what a hard stop retrains, and the `--drain-timeout` check. The drain on the real
stack is `test_down_drain.py`."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from work_pools import drain


def test_a_request_is_taken_once_and_only_by_an_agent_started_before_it(tmp_path):
    request = drain.write_request(tmp_path, 12.5)
    assert drain.take_request(tmp_path, since=request.requested_at + 1) is None, \
        "an agent started after the request (a later `up`) must not drain for it"
    drain.write_request(tmp_path, None)
    taken = drain.take_request(tmp_path, since=time.time() - 60)
    assert taken is not None and taken.timeout_s is None and "yoloq down" in taken.reason
    assert drain.take_request(tmp_path, since=0) is None, "a request is consumed by its reader"


def test_a_report_is_read_back_only_when_written_for_this_down(tmp_path):
    since = time.time()
    drain.write_report(tmp_path, [drain.Outcome("job-a", "job-a.s1.e0-8", True, 5)], 3.2)
    assert drain.read_report(tmp_path, since + 60) is None
    lines = drain.report_lines(drain.read_report(tmp_path, since))
    assert lines[0] == ("job job-a: drained at epoch 5 (checkpoint saved); it resumes from "
                        "epoch 5 after `yoloq up`")
    assert lines[-1] == "drain took 3.2 s"


def test_a_new_request_clears_the_previous_report_and_deadline(tmp_path):
    drain.write_report(tmp_path, [], 0.0)
    drain.write_deadline(tmp_path, time.time() + 30)
    drain.write_request(tmp_path, 0)
    assert drain.read_report(tmp_path, 0) is None and drain.read_deadline(tmp_path, 0) is None


def test_the_bound_is_one_epoch_plus_its_checkpoint_plus_the_margin():
    assert drain.bound_s(40.0, 6.0) == 40.0 + 6.0 + drain.MARGIN_S
    assert drain.bound_s(40.0, None) == 40.0 + drain.MARGIN_S  # no upload measured yet


@pytest.mark.parametrize("checkpoint, trained, stop_after, expected", [
    (3, 5, 8, (4, 6)),    # epochs 4-5 trained since the checkpoint, 6 in progress
    (3, 3, 8, (4, 4)),    # only the epoch in progress
    (0, 0, 8, (1, 1)),    # stopped in its first epoch
    (6, 7, 8, (7, 8)),    # the in-progress epoch is capped at the segment's target
    (8, 8, 8, None),      # everything checkpointed (finalising): nothing is retrained
])
def test_a_hard_stop_retrains_the_epochs_since_the_checkpoint(checkpoint, trained, stop_after, expected):
    assert drain.retrained(checkpoint, trained, stop_after) == expected


def test_a_hard_stop_names_the_epochs_it_costs():
    line = drain.Outcome("job-b", "s", False, 3, "Crashed", 4, 6).line()
    assert "stopped hard" in line and "epoch 3" in line and "epochs 4-6 will be retrained" in line
    one = drain.Outcome("job-b", "s", False, 3, "Crashed", 4, 4).line()
    assert "so epoch 4 will be retrained" in one
    none = drain.Outcome("job-b", "s", False, 8, "Crashed").line()
    assert "nothing is retrained" in none


@pytest.mark.parametrize("value", ["-1", "nan", "abc"])
def test_a_bad_drain_timeout_is_one_line_and_exit_2(value, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "yoloq.cli", "--home", str(tmp_path), "down",
                           "--drain-timeout", value], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    assert "--drain-timeout" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr

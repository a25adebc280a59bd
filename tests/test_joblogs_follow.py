"""`yoloq logs --follow` on a scripted page source (the pure part of the follow loop): each line
once, and the lines that reach the server after the job ended are still printed."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from yoloq.views.joblogs import follow


def line(n: int) -> dict:
    return {"id": f"id-{n}", "time": f"2026-12-04T00:00:{n:02d}+00:00", "run": "job.s1.e0-1",
            "level": "INFO", "message": f"line {n}"}


def scripted(pages: list[tuple[bool, list[int]]], ended: str | None = None):
    """fetch() answering each page in turn (finished, line numbers), the last one from then on;
    a finished page says the job `ended` then (None: no "ended" field, as an older server)."""
    calls = []

    def fetch(after):
        calls.append(after)
        finished, numbers = pages[min(len(calls) - 1, len(pages) - 1)]
        page = {"finished": finished, "lines": [line(n) for n in numbers]}
        if finished and ended is not None:
            page["ended"] = ended
        return page
    return fetch, calls


def test_a_line_that_arrives_after_the_job_ended_is_printed():
    # read 1: training; read 2: the job ended, the segment's last line not stored yet;
    # read 3: it is there. Stopping at the first quiet read after the end would lose it.
    fetch, calls = scripted([(False, [1]), (True, [1]), (True, [1]), (True, [1, 2])])
    got = [row["message"] for row in follow(fetch, interval_s=0.01, drain_s=0.2)]
    assert got == ["line 1", "line 2"] and len(calls) > 4


def test_without_follow_one_read_and_each_line_once():
    fetch, calls = scripted([(False, [1, 2])])
    assert [row["id"] for row in follow(fetch, follow_on=False)] == ["id-1", "id-2"]
    assert len(calls) == 1


def test_a_job_that_ended_long_ago_is_read_once():
    fetch, calls = scripted([(True, [1, 2])], ended="2026-01-01T00:00:00+00:00")
    started = time.monotonic()
    got = [row["message"] for row in follow(fetch, interval_s=0.01, drain_s=60)]
    assert got == ["line 1", "line 2"] and len(calls) == 1
    assert time.monotonic() - started < 30  # not the 60 s drain


def test_a_job_that_just_ended_is_still_drained():
    just_now = datetime.now(timezone.utc).isoformat()
    fetch, calls = scripted([(True, [1]), (True, [1]), (True, [1, 2])], ended=just_now)
    got = [row["message"] for row in follow(fetch, interval_s=0.01, drain_s=0.3)]
    assert got == ["line 1", "line 2"] and len(calls) > 3

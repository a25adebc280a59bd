"""The environment every yoloq process sets before Prefect is imported (`yoloq.base.offline`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _applied(env_extra: dict[str, str], *names: str) -> list[str]:
    """Run `offline.apply()` in a fresh interpreter (it only sets what is unset) and read back."""
    code = ("import os; from yoloq.base import offline; offline.apply(); "
            f"print('|'.join(os.environ.get(n, '') for n in {names!r}))")
    env = {k: v for k, v in os.environ.items() if k not in names and k != "YOLOQ_WAKE"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, **env_extra},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().split("|")


@pytest.mark.parametrize("wake, poll", [({}, "5"), ({"YOLOQ_WAKE": "poll"}, "1"),
                                        ({"YOLOQ_WAKE": "events"}, "5")])
def test_the_worker_poll_is_a_5s_fallback_with_the_event_wake_and_1s_without(wake, poll):
    assert _applied(wake, "PREFECT_WORKER_QUERY_SECONDS") == [poll]


def test_an_explicit_worker_poll_wins():
    assert _applied({"PREFECT_WORKER_QUERY_SECONDS": "2"}, "PREFECT_WORKER_QUERY_SECONDS") == ["2"]


def test_waiting_segments_are_never_marked_late():
    assert _applied({}, "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED") == ["false"]

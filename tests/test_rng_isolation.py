"""Draws from Python's `random` in other threads (websocket pings, retry jitter) leave the
training thread's stream untouched once it is isolated."""

from __future__ import annotations

import random
import threading

import pytest

from yoloq.engine import rng_isolation


@pytest.fixture
def isolated():
    rng_isolation.isolate()
    yield
    rng_isolation.restore()


def draws(n: int) -> list[float]:
    return [random.random() for _ in range(n)]


def draw_in_another_thread() -> None:
    thread = threading.Thread(target=lambda: [random.getrandbits(32) for _ in range(5)])
    thread.start()
    thread.join()


def test_other_threads_do_not_shift_the_training_stream(isolated):
    random.seed(7)
    first, second = draws(3), None
    random.seed(7)
    head = draws(1)
    draw_in_another_thread()  # in the middle of an "epoch"
    second = head + draws(2)
    assert first == second


def test_without_isolation_they_do():
    """The failure it prevents: the same interleaving shifts an unprotected stream."""
    random.seed(7)
    first = draws(3)
    random.seed(7)
    head = draws(1)
    draw_in_another_thread()
    assert head + draws(2) != first


def test_seed_and_state_follow_the_calling_thread(isolated):
    random.seed(11)
    state = random.getstate()
    expected = draws(2)
    random.setstate(state)
    assert draws(2) == expected
    assert random._inst.getstate() != state, "other threads keep the shared generator"

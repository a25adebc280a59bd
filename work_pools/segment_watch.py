"""One poll for every waiting parent: the job runner's shared watch on segment runs.

A parent waiting for its segment used to read that run once a second, each in its own
process: N waiting jobs cost N API reads a second. Inside the job runner the parents are
threads, and they hand their wait to this watch instead: one thread reads every watched run
that has reached a final state, in batches of `BATCH` ids per request, once per `PERIOD_S`,
and wakes the parents whose runs are final. It does not wait out its period when Prefect's
event stream says a watched run turned final (`work_pools.events_wake`): the event triggers
the read at once, and the periodic read stays as the fallback for missed events. Outside the
runner (`shared_watch()` is None) a parent polls by itself as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from work_pools import events_wake

PERIOD_S = 1.0
BATCH = 200
_FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")

_shared: SegmentWatch | None = None


def shared_watch() -> SegmentWatch | None:
    """The watch of this process's job runner, or None outside it."""
    return _shared


def install(watch: SegmentWatch) -> None:
    global _shared
    _shared = watch
    watch.start()


class _Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.run: Any = None


class SegmentWatch:
    """Waiters register a flow-run id and block; one thread reads the final ones and wakes them."""

    def __init__(self, period_s: float = PERIOD_S, batch: int = BATCH,
                 on_wait: Callable[[], None] | None = None, events: bool | None = None) -> None:
        self.period_s, self.batch, self.on_wait = period_s, batch, on_wait
        self.events = events_wake.enabled() if events is None else events
        self.event_wakes = 0    # waiters woken by a read that an event triggered
        self.poll_wakes = 0     # waiters woken by the periodic read
        self._kick = threading.Event()
        self._listener: events_wake.ListenerThread | None = None
        self._waiters: dict[UUID, list[_Waiter]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._log = logging.getLogger("yoloq.segment_watch")
        self._client: Any = None  # the watch thread's own client, kept between reads

    def start(self) -> None:
        events_wake.start_daemon(self._loop, "segment-watch")
        if self.events:
            self._listener = events_wake.ListenerThread(events_wake.run_state_filter(),
                                                        self._on_event).start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._listener is not None:
            self._listener.stop()

    def _on_event(self, event: Any) -> None:
        if events_wake.state_type(event) not in events_wake.FINAL_TYPES:
            return
        with self._lock:
            watched = events_wake.run_id(event) in self._waiters
        if watched:
            self._kick.set()

    def watched(self) -> int:
        with self._lock:
            return len(self._waiters)

    def wait_final(self, flow_run_id: Any) -> Any:
        """Block until the run is in a final state; return it as read from the API.
        `on_wait` runs first (the job runner lets the next parent start)."""
        if self.on_wait is not None:
            self.on_wait()
        waiter = _Waiter()
        key = UUID(str(flow_run_id))
        with self._lock:
            self._waiters.setdefault(key, []).append(waiter)
        waiter.event.wait()
        return waiter.run

    def _loop(self) -> None:
        while not self._stop.is_set():
            kicked = self._kick.wait(self.period_s)
            self._kick.clear()
            if self._stop.is_set():
                break
            try:
                woken = self.poll_once()
                if kicked:
                    self.event_wakes += woken
                else:
                    self.poll_wakes += woken
            except Exception as exc:  # the API is down or slow: keep the waiters, try again
                self._close_client()  # with a new connection
                self._log.warning("reading waited-for segment runs failed (%s); retrying",
                                  " ".join(str(exc).split())[:300])
        self._close_client()

    def _api(self) -> Any:
        """One client for the watch thread's reads: a client per read builds a TLS context
        (loads the CA bundle) each time, tens of ms of CPU a read (py-spy: 9% of a core)."""
        if self._client is None:
            from prefect.client.orchestration import get_client

            client = get_client(sync_client=True)
            self._client = client.__enter__()  # a sync client enters as itself
        return self._client

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.__exit__(None, None, None)
            except Exception:  # closing a broken connection: nothing left to do
                pass

    def poll_once(self) -> int:
        """Read the watched runs that are final and wake their waiters. Returns how many."""
        with self._lock:
            ids = list(self._waiters)
        woken = 0
        for start in range(0, len(ids), self.batch):
            for run in _read_final(self._api(), ids[start:start + self.batch]):
                with self._lock:
                    waiters = self._waiters.pop(run.id, [])
                for waiter in waiters:
                    waiter.run = run
                    waiter.event.set()
                woken += len(waiters)
        return woken


def _read_final(client: Any, ids: list[UUID]) -> list[Any]:
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    flt = FlowRunFilter(id=FlowRunFilterId(any_=ids), state=FlowRunFilterState(
        type=FlowRunFilterStateType(any_=[StateType[name] for name in _FINAL])))
    return client.read_flow_runs(flow_run_filter=flt, limit=len(ids))

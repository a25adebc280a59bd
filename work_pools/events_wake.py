"""Wake a waiting loop from Prefect's event stream instead of at its next poll.

The server emits `prefect.flow-run.<State>` for every state change (the resource carries
`prefect.state-type`, the related resources the run's work pool). Two loops listen:

- the `yolo-gpu` worker (`work_pools.worker`) runs a scheduling pass as soon as a segment
  of its pool turns Scheduled (a new pending segment) or final (a freed slot), a node
  reports a freed slot (`SLOT_FREED`, emitted once a segment's process has exited), or an
  urgent job is submitted (its parent turns Scheduled: `work_pools.announce`);
- the job runner takes a new job (a `yolo-job` run of its pool turning Scheduled) at once, and
  its `SegmentWatch` reads a waited-for segment as soon as it turns final.

Events can be missed (a reconnect, a slow server): both loops keep their poll as the
fallback. `YOLOQ_WAKE=poll` turns the event wake off (bench/preemption.py compares both).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import anyio

from yoloq.domain.contract import SLOT_FREED_EVENT, node_resource_id

FINAL_TYPES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED"})
WAKE_TYPES = FINAL_TYPES | {"SCHEDULED"}
SLOT_FREED = SLOT_FREED_EVENT
RETRY_S = 2.0
EVENT_COALESCE_S = 0.05  # kicks this close together start one pass
_RUN_PREFIX = "prefect.flow-run."
_LOG = logging.getLogger("yoloq.events_wake")


def enabled() -> bool:
    """Event wake on unless `YOLOQ_WAKE=poll`."""
    from yoloq.base.offline import event_wake_enabled

    return event_wake_enabled()


def run_id(event: Any) -> UUID | None:
    """The flow run an event is about, or None."""
    rid = str(event.resource.id)
    if not rid.startswith(_RUN_PREFIX):
        return None
    try:
        return UUID(rid[len(_RUN_PREFIX):])
    except ValueError:
        return None


def state_type(event: Any) -> str:
    return str(event.resource.get("prefect.state-type") or "")


def in_pool(event: Any, pool: str) -> bool:
    return any(r.get("prefect.resource.role") == "work-pool" and r.get("prefect.resource.name") == pool
               for r in event.related)


def has_tag(event: Any, tag: str) -> bool:
    """The run the event is about carries this tag (a related resource of role `tag`)."""
    return any(r.get("prefect.resource.role") == "tag" and r.get("prefect.resource.id") == f"prefect.tag.{tag}"
               for r in event.related)


def run_state_filter(extra: tuple[str, ...] = ()) -> Any:
    """Flow-run state events (their state type is checked on arrival: the event's name
    carries the state's own name, e.g. `Preempted`), plus the events named in `extra`."""
    from prefect.events.filters import EventFilter, EventNameFilter

    return EventFilter(event=EventNameFilter(prefix=[_RUN_PREFIX, *extra]))


@dataclass
class WakeStats:
    """How passes were started: by an event (with its delay from the event) or by the poll."""

    event_passes: int = 0
    poll_passes: int = 0
    delays_s: deque[float] = field(default_factory=lambda: deque(maxlen=500))
    last_event: str = ""

    def record_event(self, name: str, occurred: float) -> None:
        self.event_passes += 1
        self.last_event = name
        self.delays_s.append(max(0.0, time.time() - occurred))

    def as_dict(self) -> dict[str, Any]:
        delays = sorted(self.delays_s)
        p50 = round(1000 * delays[len(delays) // 2], 1) if delays else None
        return {"event_passes": self.event_passes, "poll_passes": self.poll_passes,
                "event_delay_ms_p50": p50, "last_event": self.last_event}


async def listen(event_filter: Any, on_event: Callable[[Any], None],
                 log: logging.Logger | logging.LoggerAdapter = _LOG,
                 on_connect: Callable[[], None] | None = None) -> None:
    """Forever: subscribe to the server's event stream and hand every event to `on_event`;
    after a failure, wait `RETRY_S` and subscribe again (the caller's poll covers the gap)."""
    from prefect.events.clients import get_events_subscriber

    while True:
        try:
            async with get_events_subscriber(filter=event_filter.model_copy(deep=True),
                                             reconnection_attempts=2) as subscriber:
                if on_connect is not None:
                    on_connect()
                async for event in subscriber:
                    on_event(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the server restarted or is busy: poll covers it meanwhile
            log.warning("event stream lost (%s); polling until it is back",
                        " ".join(str(exc).split())[:200])
        await asyncio.sleep(RETRY_S)


class PassWaker:
    """Runs `run_pass` as soon as `kick` is called, by an event of the stream or locally;
    kicks within `EVENT_COALESCE_S` of each other start one pass (a burst of submissions).
    The caller's own poll stays the fallback for missed events."""

    def __init__(self, run_pass: Callable[[], Awaitable[Any]],
                 log: logging.Logger | logging.LoggerAdapter = _LOG) -> None:
        self._run_pass, self._log = run_pass, log
        self._due: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self.connected = threading.Event()  # set once the first subscription is up

    @property
    def serving(self) -> bool:
        return self._scope is not None

    def kick(self) -> None:
        if self._due is not None:
            self._due.set()

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def serve(self, event_filter: Any, on_event: Callable[[Any], None]) -> None:
        """Listen to the stream (`on_event` decides what kicks) and run the kicked passes."""
        self._due = anyio.Event()
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with anyio.create_task_group() as group:
                group.start_soon(listen, event_filter, on_event, self._log, self.connected.set)
                while True:
                    await self._due.wait()
                    await anyio.sleep(EVENT_COALESCE_S)
                    self._due = anyio.Event()
                    try:
                        await self._run_pass()
                    except Exception as exc:  # e.g. 5xx while the database restarts: the
                        # process (and its runs) must live on; the poll loop tries again
                        self._log.warning("event-woken pass failed (%s); the poll retries",
                                          " ".join(str(exc).split())[:200])


def start_daemon(target: Callable[[], None], name: str) -> None:
    """Start `target` on a daemon thread inside a copy of the caller's context: Prefect keeps
    its settings (e.g. `temporary_settings`, a profile) in context variables, which a bare
    thread does not inherit; without this the thread's client would talk to another server."""
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(target,), name=name, daemon=True).start()


class ListenerThread:
    """`listen` on a daemon thread with its own event loop (for the runner's sync world)."""

    def __init__(self, event_filter: Any, on_event: Callable[[Any], None]) -> None:
        self._filter, self._on_event = event_filter, on_event
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self.connected = threading.Event()  # set once the first subscription is up

    def start(self) -> ListenerThread:
        start_daemon(self._run, "events-wake")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(listen(self._filter, self._on_event,
                                                   on_connect=self.connected.set))
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)


def emit_slot_freed(node: str, pool: str, pool_id: Any, flow_run_id: UUID) -> None:
    """Tell every node's scheduler that a segment's process on `node` has exited."""
    from prefect.events import emit_event

    try:
        emit_event(SLOT_FREED, resource={"prefect.resource.id": node_resource_id(node)},
                   related=[{"prefect.resource.id": f"prefect.work-pool.{pool_id}",
                             "prefect.resource.role": "work-pool", "prefect.resource.name": pool},
                            {"prefect.resource.id": f"{_RUN_PREFIX}{flow_run_id}",
                             "prefect.resource.role": "flow-run"}])
    except Exception as exc:  # informative: the poll finds the free slot anyway
        _LOG.debug("slot-freed event not sent: %s", exc)

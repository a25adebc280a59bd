"""Read yoloq's audit events back from Prefect."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from yoloq.domain.contract import EVENT_PREFIX, RESOURCE_TEAM, job_resource_id


def read_audit(client: Any, since: datetime | None = None, job_id: str | None = None,
               team: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    from prefect.events.filters import (EventFilter, EventNameFilter, EventOccurredFilter,
                                        EventResourceFilter)

    since = since or datetime.now(timezone.utc) - timedelta(days=7)
    resource = EventResourceFilter(id=[job_resource_id(job_id)]) if job_id else None
    flt = EventFilter(occurred=EventOccurredFilter(since=since),
                      event=EventNameFilter(prefix=[EVENT_PREFIX]), resource=resource)
    page = client.read_events(filter=flt, limit=min(limit, 50))
    events = list(page.events)
    while page.next_page and len(events) < limit:
        page = client.read_events_page(page.next_page)
        events.extend(page.events)
    rows = [_row(e) for e in events]
    if team:
        rows = [r for r in rows if r.get("team") == team]
    return sorted(rows, key=lambda r: r["occurred"])


def _row(event: Any) -> dict[str, Any]:
    payload = dict(event.payload or {})
    resource = dict(event.resource)
    return {"occurred": event.occurred.isoformat(), "event": event.event,
            "job": payload.pop("job", resource.get("prefect.resource.name")),
            "team": resource.get(RESOURCE_TEAM, payload.get("team")),
            "actor": payload.pop("actor", ""), "reason": payload.pop("reason", ""),
            "details": payload}

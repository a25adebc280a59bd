"""Quota breaches as Prefect events, and the automation that turns them into notifications.

The worker calls `notify_quota_breaches` with each Decision's `quota_breaches`: every
breach is emitted once per team and quota period as the event
`yoloq.team.quota_exceeded` (resource `yoloq.team.<team>`, payload spent/budget/period),
and remembered in the Prefect Variable `yoloq-quota-notified`, so a restarted or new
scheduler does not notify again.

`ensure_quota_automation(target)` creates, or updates in place, the automation
`yoloq: team over quota`: that event triggers a notification through a Prefect
notification block. `target` is a webhook URL (saved as the `CustomWebhookNotificationBlock`
`yoloq-alerts`, which POSTs JSON `{"subject", "body", "name"}`) or the name of a
notification block already saved (`slack-webhook/team-alerts`, or a bare name of a
custom-webhook block).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from work_pools.policy.fairshare import period_start
from work_pools.policy.model import QuotaBreach

QUOTA_EVENT = "yoloq.team.quota_exceeded"
ALERTS_BLOCK = "yoloq-alerts"
AUTOMATION_NAME = "yoloq: team over quota"
SUBJECT = "yoloq: team {{ event.payload.team }} is over its quota"
BODY = ("Team {{ event.payload.team }} spent {{ event.payload.spent_tu }} of "
        "{{ event.payload.budget_tu }} TU this {{ event.payload.period }} "
        "(since {{ event.payload.period_start }}). Its segments now run only on GPUs nobody "
        "else wants, until the next period.")


def breach_key(breach: QuotaBreach, now: float) -> str:
    """One key per team and quota period: `team:day:2026-11-05`."""
    start = period_start(now, breach.period)
    day = datetime.datetime.fromtimestamp(start, datetime.timezone.utc).date().isoformat()
    return f"{breach.team}:{breach.period}:{day}"


def unnotified(breaches: Iterable[QuotaBreach], notified: Iterable[str],
               now: float) -> list[tuple[str, QuotaBreach]]:
    """The breaches not yet notified in their period, with their keys (pure)."""
    seen = set(notified)
    return [(breach_key(b, now), b) for b in breaches if breach_key(b, now) not in seen]


def team_resource(team: str) -> dict[str, str]:
    return {"prefect.resource.id": f"yoloq.team.{team}", "prefect.resource.name": team}


def emit_quota_breach(breach: QuotaBreach, now: float) -> bool:
    """Emit one `yoloq.team.quota_exceeded` event; False when events cannot be sent."""
    from prefect.events import emit_event

    from yoloq.events import actor

    start = datetime.datetime.fromtimestamp(period_start(now, breach.period), datetime.timezone.utc)
    event = emit_event(event=QUOTA_EVENT, resource=team_resource(breach.team), payload={
        "actor": actor(), "team": breach.team, "spent_tu": round(breach.spent_tu, 4),
        "budget_tu": round(breach.budget_tu, 4), "period": breach.period,
        "period_start": start.isoformat()})
    return event is not None


def notify_quota_breaches(breaches: Iterable[QuotaBreach], store: Any,
                          now: float) -> list[QuotaBreach]:
    """Emit each new breach once and remember it in `store` (a `NotifiedBreaches`: its
    `notified()` and `mark(keys, now)`); returns those emitted."""
    fresh = unnotified(breaches, store.notified(), now)
    sent = [(key, breach) for key, breach in fresh if emit_quota_breach(breach, now)]
    if sent:
        store.mark([key for key, _ in sent], now)
    return [breach for _, breach in sent]


class NotifiedBreaches:
    """Breaches already notified, kept in the Prefect Variable `yoloq-quota-notified`, so a
    restarted or new scheduler never notifies a breach twice (no node-local file)."""

    VARIABLE = "yoloq-quota-notified"
    RETAIN_S = 8 * 86400.0  # longer than the longest quota period

    def notified(self) -> dict[str, float]:
        from prefect.variables import Variable

        value = Variable.get(self.VARIABLE, default=None)
        return {k: float(t) for k, t in value.items()} if isinstance(value, dict) else {}

    def mark(self, keys: Iterable[str], now: float) -> None:
        from prefect.variables import Variable

        kept = {k: t for k, t in self.notified().items() if now - t < self.RETAIN_S}
        Variable.set(self.VARIABLE, {**kept, **{k: now for k in keys}}, overwrite=True)


# -- the automation ----------------------------------------------------------------

def ensure_quota_automation(target: str, client: Any = None) -> UUID:
    """Create or update the quota automation; `target` is a webhook URL or a block name."""
    block_id = notification_block_id(target)
    if client is None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as own:
            return _upsert_automation(own, block_id)
    return _upsert_automation(client, block_id)


def notification_block_id(target: str) -> UUID:
    """Save a webhook URL as the `yoloq-alerts` block, or look a saved block up by name."""
    if target.startswith(("http://", "https://")):
        return save_webhook_block(target)
    from prefect.blocks.core import Block

    from yoloq.errors import UserError

    name = target if "/" in target else f"custom-webhook/{target}"
    try:
        block = Block.load(name, _sync=True)
    except ValueError:
        raise UserError("block", f"no saved block {name!r}",
                        "save it in the Prefect UI, or give a webhook URL") from None
    if "notify" not in block.get_block_capabilities():
        raise UserError("block", f"{target!r} is not a notification block",
                        "give a webhook URL or a saved notification block")
    return block._block_document_id


def save_webhook_block(url: str, name: str = ALERTS_BLOCK) -> UUID:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    block = CustomWebhookNotificationBlock(
        name=name, url=url, method="POST",
        json_data={"subject": "{{subject}}", "body": "{{body}}", "name": "{{name}}"})
    return block.save(name, overwrite=True, _sync=True)


def quota_automation(block_id: UUID) -> Any:
    """The automation definition: each quota event notifies once, per team."""
    from datetime import timedelta

    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    trigger = EventTrigger(expect={QUOTA_EVENT}, match={"prefect.resource.id": "yoloq.team.*"},
                           for_each={"prefect.resource.id"}, posture=Posture.Reactive,
                           threshold=1, within=timedelta(0))
    return AutomationCore(
        name=AUTOMATION_NAME, enabled=True, trigger=trigger,
        description="Notify when a yoloq team spends its Training Unit quota.",
        actions=[SendNotification(block_document_id=block_id, subject=SUBJECT, body=BODY)])


def _upsert_automation(client: Any, block_id: UUID) -> UUID:
    wanted = quota_automation(block_id)
    existing = client.read_automations_by_name(AUTOMATION_NAME)
    if not existing:
        return client.create_automation(wanted)
    first, *duplicates = existing
    client.update_automation(first.id, wanted)
    for extra in duplicates:
        client.delete_automation(extra.id)
    return first.id

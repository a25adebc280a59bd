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

Mail (`mail_quota_breaches`, called by `notify_quota_breaches`): when `YOLOQ_SMTP_URL` is
set (`yoloq.mail`), the team's owner (`yoloq team add --owner`, the team store) gets one mail
per breach: per team, quota period and budget, remembered in the same Variable under
`mail:` keys. A server that cannot be reached is logged as an error and retried on a later
pass (at most every `MAIL_RETRY_S`), never marked as sent.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from work_pools.policy.fairshare import period_start
from work_pools.policy.model import QuotaBreach
from yoloq.domain.contract import QUOTA_EVENT, team_resource_id

ALERTS_BLOCK = "yoloq-alerts"
AUTOMATION_NAME = "yoloq: team over quota"
SUBJECT = "yoloq: team {{ event.payload.team }} is over its quota"
MAIL_RETRY_S = 300.0
_LOG = logging.getLogger("yoloq.quota_alerts")
_failed_at: dict[str, float] = {}  # mail key -> last failed attempt (this process)
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
    return {"prefect.resource.id": team_resource_id(team), "prefect.resource.name": team}


def emit_quota_breach(breach: QuotaBreach, now: float) -> bool:
    """Emit one `yoloq.team.quota_exceeded` event; False when events cannot be sent."""
    from prefect.events import emit_event

    from yoloq.records.events import actor

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
    mail_quota_breaches(breaches, store, now)
    return [breach for _, breach in sent]


# -- mail to the team's owner ------------------------------------------------------

def mail_key(breach: QuotaBreach, now: float) -> str:
    """One mail per team, period and budget: a raised quota breached again mails again."""
    return f"mail:{breach_key(breach, now)}:{breach.budget_tu:g}"


def mail_quota_breaches(breaches: Iterable[QuotaBreach], store: Any, now: float,
                        teams: Any = None) -> list[QuotaBreach]:
    """Mail each breach not yet mailed to its team's owner; returns those mailed. Nothing
    happens without `YOLOQ_SMTP_URL`; a team without an owner address is logged once."""
    from yoloq.base.mail import smtp_config

    config = smtp_config()
    breaches = list(breaches)
    if config is None or not breaches:
        return []
    seen = set(store.notified())
    todo = [(mail_key(b, now), b) for b in breaches if mail_key(b, now) not in seen]
    todo = [(k, b) for k, b in todo if now - _failed_at.get(k, float("-inf")) >= MAIL_RETRY_S]
    done, mailed = [], []
    for key, breach in todo:
        outcome = _mail_one(config, breach, now, teams)
        if outcome is None:
            _failed_at[key] = now
            continue
        done.append(key)
        if outcome:
            mailed.append(breach)
    if done:
        store.mark(done, now)
    return mailed


def _mail_one(config: Any, breach: QuotaBreach, now: float, teams: Any) -> bool | None:
    """True when mailed, False when the team has no owner (logged), None when sending failed."""
    from yoloq.base.mail import MailError, send_mail
    from yoloq.records.teams import owner_of

    owner = owner_of(breach.team, teams)
    if not owner:
        _LOG.warning("team %s is over its quota but has no owner address: no mail sent "
                     "(set one with `yoloq team add %s --owner ADDRESS`)", breach.team, breach.team)
        return False
    subject, body = quota_mail(breach, now)
    try:
        send_mail(config, owner, subject, body)
    except MailError as exc:
        _LOG.error("quota mail for team %s not sent: %s (retrying in %.0f s)", breach.team, exc,
                   MAIL_RETRY_S)
        return None
    _LOG.info("quota mail for team %s sent to %s", breach.team, owner)
    return True


def quota_mail(breach: QuotaBreach, now: float) -> tuple[str, str]:
    """Subject and body: the numbers, the period, and what happens to the team's jobs."""
    start = period_start(now, breach.period)
    end = start + (7 if breach.period == "week" else 1) * 86400.0
    fmt = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    subject = f"yoloq: team {breach.team} is over its quota"
    body = (f"Team {breach.team} has spent {breach.spent_tu:.4g} of its {breach.budget_tu:.4g} "
            f"Training Units this {breach.period} (since {fmt(start)}; 1 TU = one V100 for 24 h).\n\n"
            f"What happens to your jobs: nothing is cancelled. Until the next period starts "
            f"({fmt(end)}), your team's segments rank below every tier (below low) and do not "
            f"age: they start only on GPUs no other team's segment is waiting for, and a running "
            f"one may be preempted at its next epoch boundary (it resumes from its checkpoint "
            f"later) when another team needs the GPU.\n\n"
            f"To get more now, ask an admin to raise the quota (`yoloq quota {breach.team} --tu N`).\n")
    return subject, body


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

    from yoloq.base.errors import UserError

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

    trigger = EventTrigger(expect={QUOTA_EVENT}, match={"prefect.resource.id": team_resource_id("*")},
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

"""Quota mail: a real SMTP receiver on loopback (aiosmtpd) gets exactly one mail per breach
(team, period and budget), remembered in the real Prefect Variable; the owner comes from the
real team store; a configured server that cannot be reached is a logged error, not a send."""

from __future__ import annotations

import logging
import uuid
from email import message_from_bytes

import pytest

from work_pools.policy.model import QuotaBreach
from yoloq.base.errors import UserError
from yoloq.base.mail import smtp_config
from yoloq.ops.stack import free_port

DAY = 86400.0


class _Inbox:
    def __init__(self) -> None:
        self.messages: list = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp_server(monkeypatch):
    from aiosmtpd.controller import Controller

    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(1))
    controller.start()
    monkeypatch.setenv("YOLOQ_SMTP_URL", f"smtp://127.0.0.1:{controller.port}?from=queue@yoloq.test")
    try:
        yield inbox
    finally:
        controller.stop()


@pytest.fixture
def teams(tmp_path):
    from yoloq.records.teams import TeamStore

    store = TeamStore(tmp_path / "teams.json")
    team = f"t{uuid.uuid4().hex[:6]}"
    store.add(team, owner=f"owner@{team}.test")
    return store, team


@pytest.mark.service
def test_one_mail_per_breach_and_period(yoloq_stack, smtp_server, teams):
    from yoloq.records.quota_alerts import NotifiedBreaches, mail_quota_breaches

    store, team = teams
    now = 1_800_000_000.0 + 3600  # a fixed day (UTC)
    breach = QuotaBreach(team, 21.5, 20.0, "day")
    assert mail_quota_breaches([breach], NotifiedBreaches(), now, store) == [breach]
    [(to, mail)] = smtp_server.messages
    assert to == [f"owner@{team}.test"] and mail["From"] == "queue@yoloq.test"
    assert team in mail["Subject"]
    body = mail.get_payload()
    assert "21.5 of its 20 Training Units this day" in body and "rank below every tier" in body

    again = NotifiedBreaches()  # a restarted scheduler: what it knows comes from Prefect
    assert mail_quota_breaches([breach], again, now + 600, store) == []
    assert len(smtp_server.messages) == 1  # same period: nothing more

    raised = QuotaBreach(team, 31.0, 30.0, "day")  # quota raised, breached again: a new breach
    assert mail_quota_breaches([raised], again, now + 1200, store) == [raised]
    assert mail_quota_breaches([breach], again, now + DAY, store) == [breach]  # next period
    assert len(smtp_server.messages) == 3


@pytest.mark.service
def test_breach_through_the_scheduler_hook_mails_the_owner(yoloq_stack, smtp_server, teams,
                                                           monkeypatch):
    """`notify_quota_breaches` (what the scheduler calls) mails too; the owner comes from the
    team store of the state folder when none is given."""
    from yoloq.records.quota_alerts import NotifiedBreaches, notify_quota_breaches

    store, team = teams
    monkeypatch.setenv("YOLOQ_HOME", str(store.path.parent))  # the scheduler's state folder
    breach = QuotaBreach(team, 3.0, 2.0, "week")
    notify_quota_breaches([breach], NotifiedBreaches(), 1_800_000_000.0)
    notify_quota_breaches([breach], NotifiedBreaches(), 1_800_000_060.0)
    assert [to for to, _ in smtp_server.messages] == [[f"owner@{team}.test"]]


@pytest.mark.service
def test_unreachable_server_is_a_logged_error_and_retried(yoloq_stack, teams, monkeypatch, caplog):
    from yoloq.records.quota_alerts import (
        MAIL_RETRY_S,
        NotifiedBreaches,
        mail_key,
        mail_quota_breaches,
    )

    store, team = teams
    monkeypatch.setenv("YOLOQ_SMTP_URL", f"smtp://127.0.0.1:{free_port(1)}")  # nobody listens
    breach = QuotaBreach(team, 5.0, 1.0, "day")
    now = 1_800_000_000.0
    with caplog.at_level(logging.ERROR, logger="yoloq.quota_alerts"):
        assert mail_quota_breaches([breach], NotifiedBreaches(), now, store) == []
    assert any(r.levelno == logging.ERROR and team in r.getMessage() and "127.0.0.1" in r.getMessage()
               for r in caplog.records)
    assert mail_key(breach, now) not in NotifiedBreaches().notified()  # not marked as sent
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="yoloq.quota_alerts"):  # throttled, then retried
        mail_quota_breaches([breach], NotifiedBreaches(), now + 1, store)
        assert not caplog.records
        mail_quota_breaches([breach], NotifiedBreaches(), now + MAIL_RETRY_S, store)
        assert caplog.records


@pytest.mark.parametrize("url", ["http://mail.example", "smtp://", "smtp://host:port"])
def test_bad_smtp_url_names_the_setting(url):
    with pytest.raises(UserError, match="YOLOQ_SMTP_URL"):
        smtp_config(url)


def test_smtp_url_parts():
    config = smtp_config("smtp+starttls://u%40x:p%2Fw@mail.test?from=q@x.test")
    assert (config.host, config.port, config.user, config.password, config.sender) == (
        "mail.test", 587, "u@x", "p/w", "q@x.test")
    assert smtp_config("") is None

"""Quota breaches: emitted once per team and period, remembered across restarts, and turned
into a notification by a real Prefect automation posting to a loopback webhook."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from work_pools.policy.model import QuotaBreach
from yoloq.records.quota_alerts import breach_key, unnotified

DAY = 86400.0
THURSDAY = 0.0  # 1970-01-01
MONDAY = 4 * DAY


@pytest.mark.parametrize(("breach", "now", "key"), [
    pytest.param(QuotaBreach("vision", 21, 20, "day"), THURSDAY + 3600, "vision:day:1970-01-01",
                 id="day"),
    pytest.param(QuotaBreach("vision", 21, 20, "day"), THURSDAY + DAY + 1, "vision:day:1970-01-02",
                 id="next-day-new-key"),
    pytest.param(QuotaBreach("nlp", 9, 5, "week"), MONDAY + 6 * DAY, "nlp:week:1970-01-05",
                 id="week-keyed-by-monday"),
])
def test_breach_key_is_per_team_and_period(breach, now, key):
    assert breach_key(breach, now) == key


def test_only_unnotified_breaches_are_emitted():
    breaches = [QuotaBreach("a", 2, 1, "day"), QuotaBreach("b", 3, 1, "day")]
    fresh = unnotified(breaches, {"a:day:1970-01-01": 10.0}, 3600.0)
    assert [(k, b.team) for k, b in fresh] == [("b:day:1970-01-01", "b")]
    assert unnotified(breaches, {}, DAY + 5) == [(f"{b.team}:day:1970-01-02", b) for b in breaches]


class _Receiver(BaseHTTPRequestHandler):
    inbox: "queue.Queue[dict]" = queue.Queue()

    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.inbox.put(json.loads(body or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Receiver.inbox
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def prefect_api(yoloq_stack):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: yoloq_stack.api_url}):
        yield yoloq_stack


def _wait_for(inbox: "queue.Queue[dict]", team: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            message = inbox.get(timeout=1.0)
        except queue.Empty:
            continue
        if team in message.get("subject", ""):
            return message
    raise AssertionError(f"no notification for {team} within {timeout_s:.0f} s")


@pytest.mark.service
def test_breach_event_notifies_the_webhook_once(prefect_api, webhook, tmp_path):
    from prefect.client.orchestration import get_client

    from yoloq.records.quota_alerts import AUTOMATION_NAME, ensure_quota_automation

    url, inbox = webhook
    first = ensure_quota_automation(url)
    try:
        assert _cli_alerts_webhook(url) == 0  # `yoloq alerts webhook URL`: updates in place
        with get_client(sync_client=True) as client:
            assert [a.id for a in client.read_automations_by_name(AUTOMATION_NAME)] == [first]
        _notify_once(tmp_path, inbox)
    finally:
        with get_client(sync_client=True) as client:
            client.delete_automation(first)


def _cli_alerts_webhook(url: str) -> int:
    import argparse

    from yoloq.commands import alerts

    parser = argparse.ArgumentParser()
    alerts.add_arguments(parser)
    return alerts.run(parser.parse_args(["webhook", url]))


def test_cli_rejects_a_url_that_is_not_http():
    import argparse

    from yoloq.commands import alerts
    from yoloq.base.errors import UserError

    parser = argparse.ArgumentParser()
    alerts.add_arguments(parser)
    with pytest.raises(UserError, match="not an http"):
        alerts.run(parser.parse_args(["webhook", "ftp://example"]))


def _notify_once(tmp_path, inbox) -> None:
    from prefect.events.worker import EventsWorker

    from yoloq.records.quota_alerts import NotifiedBreaches, notify_quota_breaches

    team = f"team-{uuid.uuid4().hex[:6]}"
    now = time.time()
    breach = QuotaBreach(team, 21.5, 20.0, "day")
    assert notify_quota_breaches([breach], NotifiedBreaches(), now) == [breach]
    EventsWorker.drain_all()

    message = _wait_for(inbox, team)
    assert "21.5 of 20.0 TU this day" in message["body"]
    assert message["name"] == "yoloq-alerts"

    restarted = NotifiedBreaches()  # another scheduler: what it knows comes from Prefect
    assert notify_quota_breaches([breach], restarted, now + 60) == []  # no second notification
    assert breach_key(breach, now) in restarted.notified()

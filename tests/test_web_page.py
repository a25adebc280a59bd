"""The queue web page in a real browser (Debian's chromium driven by Playwright) against the
session stack's API server: a low-tier job is preempted by an urgent one (both real, tiny
trainings; each held inside its epoch with SIGSTOP so the scenario does not depend on this
machine's speed). With the urgent job holding the only slot and the low job waiting, the
test logs in with a team token, sees the queue with the ETA, opens the preempted job and
sees the preemption marked on its timeline, opens the usage and rules pages and an unknown
job's page (a 404 page with a way back); no console errors, and every request the page makes stays on loopback. The queue page's screenshot is
and the preempted job's page are saved for the README (docs/img/queue-page.png, job-page.png)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from stack_helpers import freeze, thaw, wait_final, wait_for, write_spec, yoloq

pytestmark = [pytest.mark.service, pytest.mark.training]
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "img" / "queue-page.png"
JOB_SCREENSHOT = SCREENSHOT.with_name("job-page.png")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost']


def _submit(spec: Path) -> str:
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def _segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def _training(job_id: str):
    """The job's running segment once its process is training, else None."""
    from work_pools.processes import recorded_pid

    running = [s for s in _segments(job_id) if s.state and s.state.is_running()]
    return running[0].id if running and recorded_pid(running[0].id) is not None else None


def _queue_row(job_id: str) -> dict | None:
    from prefect.client.orchestration import get_client

    from yoloq.views.queueview import queue_rows

    with get_client(sync_client=True) as client:
        return next((r for r in queue_rows(client) if r["job"] == job_id), None)


@pytest.fixture(scope="module")
def preempted_and_waiting(yoloq_stack, tiny_dataset, tmp_path_factory):
    """(low job, urgent job): low was preempted by urgent, urgent holds the slot (frozen),
    low waits with an estimated start. Both are cancelled afterwards."""
    folder = tmp_path_factory.mktemp("web")
    tag = uuid.uuid4().hex[:4]
    low = _submit(write_spec(folder / "low.yaml", tiny_dataset, name=f"web-low-{tag}", team="vision",
                             priority="low", epochs=2, segment_epochs=2))
    pid = freeze(wait_for(lambda: _training(low), f"{low} training", timeout_s=600))
    urgent = _submit(write_spec(folder / "urgent.yaml", tiny_dataset, name=f"web-urgent-{tag}",
                                team="oncall", priority="urgent", epochs=1, segment_epochs=1))
    try:
        wait_for(lambda: any((s.labels or {}).get("yoloq.preempt") == "requested" for s in _segments(low)),
                 "the preemption request", timeout_s=600)  # the urgent parent starts slowly under load
    finally:
        thaw(pid)
    urgent_pid = freeze(wait_for(lambda: _training(urgent), f"{urgent} training", timeout_s=600))
    try:
        wait_for(lambda: any(s.state and s.state.name == "Preempted" for s in _segments(low)),
                 "the low job's segment to end Preempted", timeout_s=300)
        wait_for(lambda: (_queue_row(low) or {}).get("eta_low"), "the low job waiting with an ETA",
                 timeout_s=300)
        yield low, urgent
    finally:
        thaw(urgent_pid)
        for job in (low, urgent):
            yoloq("cancel", job, "--reason", "web page test done")
        for job in (low, urgent):
            wait_final(job, timeout_s=600)


@pytest.fixture
def browser_page(yoloq_stack):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        problems: list[str] = []
        hosts: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("request", lambda r: hosts.append(urlsplit(r.url).hostname or r.url))
        try:
            yield page, problems, hosts
        finally:
            browser.close()


def _token(team: str) -> str:
    from yoloq.records.teams import TeamStore  # the stack's own team store (its state folder)

    name = f"{team}-{uuid.uuid4().hex[:4]}"
    token = TeamStore().add(name, owner=f"lead@{name}.test")
    return token


def test_queue_job_usage_and_rules_pages(yoloq_stack, preempted_and_waiting, browser_page):
    low, urgent = preempted_and_waiting
    page, problems, hosts = browser_page
    base = yoloq_stack.rest_url

    page.goto(base + "/")
    assert page.url == base + "/login"  # no session: the login form
    page.fill("#token", "yq_wrong_token")
    page.click("button[type=submit]")
    assert page.locator("#login-error").is_visible()
    problems[:] = [p for p in problems if "401" not in p]  # the refused login's own status
    page.fill("#token", _token("vision"))
    page.click("button[type=submit]")
    page.wait_for_url(base + "/")
    assert "team vision" in page.locator("#who").inner_text()

    waiting = page.locator(f'tr[data-job="{low}"]')
    assert waiting.locator("td").nth(4).inner_text() == "waiting"
    assert re.fullmatch(r"now|in \S+ \(\S+-\S+\)", waiting.locator("td.eta").inner_text()), \
        waiting.locator("td.eta").inner_text()
    assert waiting.locator("td.reason").inner_text().strip()
    running = page.locator(f'tr[data-job="{urgent}"]')
    assert running.locator("td").nth(4).inner_text() == "running"
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    waiting.locator("a").click()
    page.wait_for_url(f"{base}/jobs/{low}")
    marker = page.locator("#timeline svg g.preemption")
    assert marker.count() == 1
    assert f"preempted by {urgent}" in (marker.text_content() or "")
    assert page.locator("#timeline svg g.segment").count() >= 1
    assert page.locator("#history tr.preempted").count() == 1
    assert page.locator("#mlflow-link").count() == 1, page.locator("#mlflow").inner_text()  # what it shows instead
    assert page.locator("#mlflow-link").inner_text()  # the job's MLflow run
    assert page.locator("#mlflow svg.curve").count() >= 1  # epoch 1's metrics
    page.screenshot(path=str(JOB_SCREENSHOT), full_page=True)

    page.click("text=Usage")
    page.wait_for_url(base + "/usage")
    assert page.locator("#usage-chart svg").count() == 1
    assert "vision" in page.locator("#usage").inner_text()

    page.click("text=Rules")
    page.wait_for_url(base + "/rules")
    assert page.locator("#min-runtime").inner_text().startswith("0 s")
    assert "70%" in page.locator("#long-job-rule").inner_text()
    assert page.locator("#tiers tbody tr").count() == 4

    missing = page.goto(base + "/jobs/no-such-job")  # a page, not raw JSON
    assert missing is not None and missing.status == 404
    assert "no-such-job" in page.locator("#not-found").inner_text()
    page.click("#back")
    page.wait_for_url(base + "/")
    problems[:] = [p for p in problems if "404" not in p]  # the missing page's own status

    assert not problems, problems
    assert hosts and set(hosts) <= {"127.0.0.1", "localhost"}, sorted(set(hosts))

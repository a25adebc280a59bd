"""One job, one preemption count, wherever a user reads it (real stack, real training).

Two low jobs are each preempted once by an urgent job: one victim stops at its epoch
boundary (it ends `Preempted`), the other is frozen inside its epoch and killed after its
grace (it ends `Crashed` with its preemption requested). Both count as one preemption in
`yoloq status`, `yoloq history`, `GET /v1/jobs/{id}`, the web page (its data and the page
itself) and `/metrics` (`yoloq.domain.contract.was_preempted` is the one definition)."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest

from stack_helpers import freeze, thaw, wait_final, wait_for, worker_with, write_spec, yoloq

pytestmark = [pytest.mark.service, pytest.mark.training]


def submit(spec) -> str:
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["job_id"]


def segments(job_id: str) -> list:
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import segments_of

    with get_client(sync_client=True) as client:
        return segments_of(client, job_id)


def training(job_id: str):
    """The job's running segment once its process exists (None before)."""
    from work_pools.processes import recorded_pid

    running = [s for s in segments(job_id) if s.state and s.state.is_running()]
    return running[0].id if running and recorded_pid(running[0].id) is not None else None


def preempt_requested(flow_run_id) -> bool:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return (client.read_flow_run(flow_run_id).labels or {}).get("yoloq.preempt") == "requested"


def metric_preemptions(rest_url: str, tier: str) -> float:
    """`yoloq_preemptions_total` (or the older `yoloq_preemptions_24h`) samples of `tier` in
    `/metrics`, summed over teams; 0 before any preemption (a counter has no sample yet)."""
    text = httpx.get(f"{rest_url}/metrics", timeout=120).text
    pattern = re.compile(r'^yoloq_preemptions(?:_total|_24h)\{[^}]*tier="%s"[^}]*\}\s+([0-9.eE+-]+)$' % tier, re.M)
    return sum(float(v) for v in pattern.findall(text))


@pytest.fixture(scope="module")
def admin_token(yoloq_stack) -> str:
    from yoloq.records.teams import TeamStore, store_path

    return TeamStore(store_path(yoloq_stack.paths.root)).add(f"count-{uuid.uuid4().hex[:6]}",
                                                             admin=True, label="counter")


def counts(job_id: str, rest_url: str, token: str) -> dict[str, int]:
    """The job's preemption count as each surface shows it."""
    from prefect.client.orchestration import get_client

    from yoloq.api.web_data import job_page

    status = json.loads(yoloq("status", job_id, "--json").stdout)
    history = [json.loads(line) for line in yoloq("history", job_id, "--json").stdout.splitlines()]
    auth = {"Authorization": f"Bearer {token}"}
    rest = httpx.get(f"{rest_url}/v1/jobs/{job_id}", headers=auth, timeout=120).json()
    with get_client(sync_client=True) as client:
        page = job_page(client, job_id)
    with httpx.Client(base_url=rest_url, timeout=120) as browser:
        assert browser.post("/login", data={"token": token}).status_code in (200, 303)
        html = browser.get(f"/jobs/{job_id}").text
    shown = re.search(r"(\d+) preemptions", html)
    return {
        "yoloq status": status["preemptions"],
        "yoloq history": sum(1 for row in history if row["what"] == "preempted"),
        "GET /v1/jobs/{id}": rest["preemptions"],
        "GET /v1/jobs/{id} history": sum(1 for row in rest["history"] if row["what"] == "preempted"),
        "web page data": page.job.preemptions,
        "web page data, timeline bars": sum(1 for bar in page.bars if bar.preempted_by),
        "web page": int(shown.group(1)) if shown else -1,
        "web page, timeline markers": html.count('class="preemption"'),
    }


def test_one_preemption_count_on_every_surface(yoloq_stack, tiny_dataset, admin_token, tmp_path):
    rest_url = yoloq_stack.rest_url
    before = metric_preemptions(rest_url, "low")
    tag = uuid.uuid4().hex[:4]

    # A victim frozen inside its epoch cannot reach a boundary: killed after a 1 s grace.
    with worker_with(YOLOQ_GRACE_S=1, YOLOQ_GRACE_EPOCHS=0):
        killed = submit(write_spec(tmp_path / "killed.yaml", tiny_dataset, name=f"count-killed-{tag}",
                                   priority="low", epochs=2, segment_epochs=2, export=[]))
        freeze(wait_for(lambda: training(killed), f"{killed} training"))  # never thawed
        urgent = submit(write_spec(tmp_path / "u1.yaml", tiny_dataset, name=f"count-urgent1-{tag}",
                                   team="oncall", priority="urgent", epochs=1, export=[]))
        assert wait_final(urgent)["state"] == "Completed"
        assert wait_final(killed)["state"] == "Completed"
    first = segments(killed)[0]
    assert first.state.is_crashed() and preempt_requested(first.id), first.state

    # A victim that reaches its epoch boundary stops there and ends Preempted.
    stopped = submit(write_spec(tmp_path / "stopped.yaml", tiny_dataset, name=f"count-stopped-{tag}",
                                priority="low", epochs=2, segment_epochs=2, export=[]))
    victim = wait_for(lambda: training(stopped), f"{stopped} training")
    pid = freeze(victim)  # held inside its first epoch until it is asked to stop
    try:
        urgent = submit(write_spec(tmp_path / "u2.yaml", tiny_dataset, name=f"count-urgent2-{tag}",
                                   team="oncall", priority="urgent", epochs=1, export=[]))
        wait_for(lambda: preempt_requested(victim), f"{victim} asked to stop")
    finally:
        thaw(pid)
    assert wait_final(urgent)["state"] == "Completed"
    assert wait_final(stopped)["state"] == "Completed"
    assert segments(stopped)[0].state.name == "Preempted"

    for job in (killed, stopped):
        seen = counts(job, rest_url, admin_token)
        assert seen == dict.fromkeys(seen, 1), f"{job}: {seen}"
    assert metric_preemptions(rest_url, "low") - before == 2  # both victims were low-tier

"""One answer everywhere: after `yoloq retier`, a job's tier reads the same in `yoloq status`,
`yoloq queue`, `yoloq history` (with a row naming who changed it), `GET /v1/jobs/{id}` and the
web page's data; once it has finished, `status` and the API say where its weights are, and the
file is there. Real stack, real training (a tiny job)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import httpx
import pytest
from stack_helpers import paused_worker, wait_final, wait_for, write_spec, yoloq

from yoloq.client.local_stack import FILE_NAME, USER_HEADER

pytestmark = pytest.mark.service


def _json(*args: str):
    """The command's one JSON object (`status JOB`, `submit`)."""
    out = yoloq(*args)
    assert out.returncode == 0, (args, out.stdout[-500:], out.stderr[-1500:])
    return json.loads(out.stdout)


def _rows(*args: str) -> list[dict]:
    """The command's rows: one JSON object per line (`queue`, `history`)."""
    out = yoloq(*args)
    assert out.returncode == 0, (args, out.stdout[-500:], out.stderr[-1500:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _rest_job(stack, job_id: str) -> dict:
    token = json.loads((stack.paths.root / FILE_NAME).read_text())["token"]
    answer = httpx.get(f"{stack.rest_url}/v1/jobs/{job_id}", timeout=120,
                       headers={"Authorization": f"Bearer {token}", USER_HEADER: getpass.getuser()})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _web_view(job_id: str):
    from yoloq.api import web_data
    from yoloq.service.connection import stack_client

    with stack_client() as client:
        page = web_data.job_page(client, job_id)
    assert page is not None
    return page


def _tier_change_rows(job_id: str) -> list[dict]:
    return [r for r in _rows("history", job_id, "--json") if r["what"] == "tier changed"]


def test_a_retiered_job_reads_the_same_everywhere_and_its_weights_are_shown(yoloq_stack, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "low.yaml", tiny_dataset, name="retiered", priority="low", export=[])
    with paused_worker(yoloq_stack):  # the job waits: its segment is on the queue while we look
        job_id = _json("submit", str(spec), "--json")["job_id"]
        wait_for(lambda: [r for r in _rows("queue", "--json") if r["job"] == job_id],
                 f"{job_id}'s segment in the queue", 300, every_s=2)
        out = yoloq("retier", job_id, "normal")
        assert out.returncode == 0 and out.stdout.strip() == f"{job_id}: low -> normal", out.stderr

        status = _json("status", job_id, "--json")
        assert (status["tier"], status["submitted_tier"]) == ("normal", "low"), status
        queued = [r for r in _rows("queue", "--json") if r["job"] == job_id]
        assert queued and {r["tier"] for r in queued} == {"normal"}, queued
        rest = _rest_job(yoloq_stack, job_id)
        assert (rest["tier"], rest["submitted_tier"]) == ("normal", "low"), rest
        page = _web_view(job_id)
        assert page.view.tier == page.job.tier == "normal" and page.view.submitted_tier == "low"

        (change,) = wait_for(lambda: _tier_change_rows(job_id), "the retier row in the history", 120, every_s=2)
        assert change["actor"] == getpass.getuser(), change
        assert change["detail"].startswith(f"low -> normal, by {getpass.getuser()}"), change

    final = wait_final(job_id, timeout_s=900)
    assert final["state"] == "Completed" and final["tier"] == "normal", final
    weights = final["weights"]
    assert weights and weights["finished"] is True and weights["epoch"] == 2, weights
    assert Path(weights["path"]).is_file() and weights["uri"].startswith("file://"), weights
    rest = _rest_job(yoloq_stack, job_id)
    assert rest["weights"] == weights and rest["tier"] == "normal"
    assert [r["what"] for r in rest["history"]].count("tier changed") == 1
    page = _web_view(job_id)
    assert page.view.weights.to_dict() == weights and page.view.preemptions == rest["preemptions"] == final["preemptions"]
    out = yoloq("status", job_id)
    assert out.returncode == 0 and f"weights: final weights (best.pt inside), epoch 2: {weights['path']}" in out.stdout

"""Audit log on the real stack: submit, tier change, cancel and quota change are Prefect
events with actor, job and reason, listed by `yoloq audit` (CSV through pandas)."""

from __future__ import annotations

import io
import json
import time

import pandas as pd
import pytest

from stack_helpers import write_spec, yoloq

pytestmark = pytest.mark.service


def audit_frame(*args: str) -> pd.DataFrame:
    out = yoloq("audit", "--since", "1h", "--csv", *args)
    assert out.returncode == 0, out.stderr
    return pd.read_csv(io.StringIO(out.stdout))


def wait_events(wanted: set[str], *args: str, count: int = 1, timeout_s: float = 60) -> pd.DataFrame:
    """Events arrive asynchronously: poll until each wanted one is there `count` times."""
    deadline = time.monotonic() + timeout_s
    while True:
        frame = audit_frame(*args)
        counts = frame["event"].value_counts() if len(frame) else {}
        if all(counts.get(e, 0) >= count for e in wanted) or time.monotonic() > deadline:
            return frame
        time.sleep(1)


def test_audit_lists_submit_retier_cancel_and_quota_changes(yoloq_stack, tiny_dataset, tmp_path):
    spec = write_spec(tmp_path / "audited.yaml", tiny_dataset, name="audited", team="auditors",
                      priority="low", epochs=30, segment_epochs=30, export=[])
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["job_id"]
    assert yoloq("retier", job, "high", "--reason", "deadline moved").returncode == 0
    assert yoloq("cancel", job, "--reason", "no longer needed").returncode == 0
    try:
        assert yoloq("quota", "auditors", "--tu", "0.5", "--period", "week").returncode == 0
        assert _saved_policy().quotas["auditors"].tu == 0.5
        from work_pools.policy.model import Policy

        # the first save stores the defaults and the change, never this shell's YOLOQ_MIN_RUNTIME_S=0
        assert _saved_policy().min_runtime_s == Policy().min_runtime_s
        assert yoloq("quota", "auditors", "--clear").returncode == 0
    finally:
        _delete_saved_policy()  # later tests use the environment's policy
    assert _saved_policy() is None

    wanted = {"yoloq.job.submitted", "yoloq.job.tier_changed", "yoloq.job.cancelled"}
    frame = wait_events(wanted, "--job", job)
    assert wanted <= set(frame["event"]), frame
    assert (frame["job"] == job).all()
    assert frame["actor"].notna().all()
    reasons = dict(zip(frame["event"], frame["reason"]))
    assert reasons["yoloq.job.tier_changed"] == "deadline moved"
    assert reasons["yoloq.job.cancelled"] == "no longer needed"

    quota = wait_events({"yoloq.team.quota_changed"}, "--team", "auditors", count=2)
    assert (quota["event"] == "yoloq.team.quota_changed").sum() == 2


def test_submit_refuses_a_tier_above_the_team_cap(yoloq_stack, tiny_dataset, tmp_path):
    """Tier caps apply at submit time with a one-line error and nothing queued."""
    import os
    import subprocess
    import sys

    spec = write_spec(tmp_path / "capped.yaml", tiny_dataset, name="capped", team="interns",
                      priority="urgent", epochs=1, export=[])
    out = subprocess.run([sys.executable, "-m", "yoloq.cli", "submit", str(spec)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "YOLOQ_TIER_CAPS": "interns=normal"})
    assert out.returncode == 2
    assert "priority" in out.stderr and "normal" in out.stderr and "Traceback" not in out.stderr


def _saved_policy():
    from blocks.policy import saved_block

    return saved_block()


def _delete_saved_policy() -> None:
    from prefect.client.orchestration import get_client

    from blocks.policy import POLICY_BLOCK

    with get_client(sync_client=True) as client:
        try:
            doc = client.read_block_document_by_name(POLICY_BLOCK, "yoloq-scheduling-policy")
            client.delete_block_document(doc.id)
        except Exception:
            pass

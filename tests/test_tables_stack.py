"""Every table the CLI prints, through the real CLI at `COLUMNS=80` on one real stack (one
declared CPU slot, real training): jobs whose spec names are 40 characters long, one of them
preempted by an urgent one. No line is wider than 80 columns, every job id appears whole, no
`None` is printed, `--wide` shows what 80 columns hid, `--json` prints one object per line;
and the small CLI points: no `Still processing items` on stderr of `team`, `retier`, `cancel`,
cancelling an ended job says so with exit 1, and the preemption's epoch reads the same in the
history as in the segment's own log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stack_helpers import freeze, json_lines, thaw, wait_final, wait_for, write_spec

pytestmark = [pytest.mark.service, pytest.mark.training]

WIDTH = 80
LOW_NAME = ("nightly-baseline-of-the-table-tests" + "-" * 40)[:39] + "x"  # 40 characters
URGENT_NAME = ("hotfix-detector-of-the-table-tests" + "-" * 40)[:39] + "y"
LIVE_NAME = ("cancel-me-while-it-waits-in-the-queue" + "-" * 40)[:39] + "z"
TEAM = "vision-research-team"  # 20 characters: a team name is an id too (usage, team list)
STRAY = "Still processing items"


def cli(*args: str, columns: int = WIDTH) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def fits(out: subprocess.CompletedProcess, *ids: str) -> str:
    """The command succeeded, printed nothing wider than WIDTH, and every id whole."""
    assert out.returncode == 0, (out.returncode, out.stdout[-800:], out.stderr[-1500:])
    wide = [line for line in out.stdout.splitlines() if len(line) > WIDTH]
    assert not wide, f"lines over {WIDTH} columns:\n" + "\n".join(wide)
    words = set(out.stdout.split())
    missing = [i for i in ids if i not in words]
    assert not missing, f"ids not shown whole: {missing}\n{out.stdout}"
    assert "None" not in out.stdout, out.stdout
    assert STRAY not in out.stderr, out.stderr
    return out.stdout


def clean_stderr(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, (out.returncode, out.stdout[-800:], out.stderr[-1500:])
    assert STRAY not in out.stderr and "Traceback" not in out.stderr, out.stderr


def submit(spec: Path) -> str:
    out = cli("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr[-1500:]
    assert len(out.stdout.splitlines()) == 1, out.stdout  # one spec: ONE line
    return json.loads(out.stdout)["job_id"]


def running_segment(job_id: str):
    from prefect.client.orchestration import get_client

    from work_pools.processes import recorded_pid
    from yoloq.records.jobs import segments_of

    def find():
        with get_client(sync_client=True) as client:
            live = [s for s in segments_of(client, job_id) if s.state and s.state.is_running()]
        return live[0].id if live and recorded_pid(live[0].id) is not None else None

    return wait_for(find, f"{job_id} training", 600)


def labelled(flow_run_id, key: str, value: str) -> None:
    from prefect.client.orchestration import get_client

    def read():
        with get_client(sync_client=True) as client:
            return (client.read_flow_run(flow_run_id).labels or {}).get(key) == value

    wait_for(read, f"label {key}={value}", 600)


@pytest.fixture(scope="module")
def jobs(yoloq_stack, tiny_dataset, tmp_path_factory):
    """A low job preempted by an urgent one, both run to the end; what `queue` and `status`
    showed while both were live; the output of `retier` and `team add` on the way."""
    tmp = tmp_path_factory.mktemp("tables")
    added = cli("team", "add", TEAM, "--cap", "urgent", "--weight", "1")
    seen: dict[str, subprocess.CompletedProcess] = {"team add": added}
    low = submit(write_spec(tmp / "low.yaml", tiny_dataset, name=LOW_NAME, team=TEAM, priority="low",
                            epochs=3, segment_epochs=3, export=[]))
    victim = running_segment(low)
    pid = freeze(victim)  # held inside its epoch until the scheduler has asked it to stop
    try:
        urgent = submit(write_spec(tmp / "urgent.yaml", tiny_dataset, name=URGENT_NAME, team=TEAM,
                                   priority="urgent", epochs=1, segment_epochs=1, export=[]))
        labelled(victim, "yoloq.preempt", "requested")
        for name in ("queue", "status"):
            seen[name] = cli(name)
            seen[f"{name} --wide"] = cli(name, "--wide")
            seen[f"{name} --json"] = cli(name, "--json")
    finally:
        thaw(pid)
    seen["retier"] = cli("retier", low, "normal", "--reason", "table test")
    seen["quota set"] = cli("quota", TEAM, "--tu", "5")
    assert wait_final(urgent)["state"] == "Completed"
    assert wait_final(low)["state"] == "Completed"
    yield {"low": low, "urgent": urgent, "victim": victim, "seen": seen}
    cli("quota", TEAM, "--clear")
    cli("team", "remove", TEAM)


def test_queue_and_status_fit_80_columns_with_both_ids_whole(jobs):
    seen = jobs["seen"]
    for name in ("queue", "status"):
        text = fits(seen[name], jobs["low"], jobs["urgent"])
        assert "--wide shows all" in text, text  # something was hidden, and it says how to see it
        wide = seen[f"{name} --wide"]
        assert wide.returncode == 0 and max(len(line) for line in wide.stdout.splitlines()) > WIDTH
    assert "REASON" in seen["queue --wide"].stdout and "SEGMENTS" in seen["status --wide"].stdout
    rows = json_lines(seen["queue --json"].stdout)
    assert {jobs["low"], jobs["urgent"]} <= {row["job"] for row in rows}
    assert {jobs["low"], jobs["urgent"]} <= {row["job_id"] for row in json_lines(seen["status --json"].stdout)}


def test_history_fits_and_names_one_preemption_epoch_the_segment_logged(jobs):
    from prefect.client.orchestration import get_client

    text = fits(cli("history", jobs["low"]))
    assert jobs["urgent"] in text.split(), text  # the preemptor's id, whole inside the folded detail
    rows = json_lines(cli("history", jobs["low"], "--json").stdout)
    (preempted,) = [r for r in rows if r["what"] == "preempted"]
    with get_client(sync_client=True) as client:
        ended = client.read_flow_run(jobs["victim"]).state
    assert ended.name == "Preempted", ended
    logged = ended.message.rsplit(" ", 1)[-1]  # the segment's own "preempted at epoch N"
    assert f"at epoch {logged}:" in preempted["detail"], (preempted, ended.message)
    assert re.findall(r"epoch (\d+)", preempted["detail"]) == [logged], preempted  # one epoch, not two


def test_audit_usage_team_and_quota_tables_fit(jobs):
    low, urgent = jobs["low"], jobs["urgent"]
    fits(cli("audit", "--team", TEAM), low, urgent)
    everything = fits(cli("audit"))  # slot and team events too: an empty cell, never None
    assert everything.strip()
    audit_rows = json_lines(cli("audit", "--job", low, "--json").stdout)
    assert audit_rows and all(row["job"] == low for row in audit_rows)
    fits(cli("usage", "--team", TEAM), TEAM, low, urgent)
    assert {low, urgent} <= {row["job"] for row in json_lines(cli("usage", "--team", TEAM, "--json").stdout)}
    fits(cli("team", "list"), TEAM)
    assert TEAM in {row["team"] for row in json_lines(cli("team", "list", "--json").stdout)}
    clean_stderr(jobs["seen"]["quota set"])
    fits(cli("quota"), TEAM)
    assert {"team": TEAM, "tu": 5.0, "period": "day"} in json_lines(cli("quota", "--json").stdout)


def test_the_demo_summary_fits_with_its_ids_whole(jobs):
    from prefect.client.orchestration import get_client

    from yoloq.commands.demo import summary
    from yoloq.records.jobs import list_jobs

    ids = [jobs["low"], jobs["urgent"]]
    with get_client(sync_client=True) as client:
        records = {j.job_id: j for j in list_jobs(client) if j.job_id in ids}
    text = summary(ids, records, {}, width=WIDTH)
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    assert set(ids) <= set(text.split()) and "Completed" in text.split(), text


def test_team_retier_and_cancel_leave_no_stray_line_on_stderr(jobs, tiny_dataset, tmp_path):
    clean_stderr(jobs["seen"]["team add"])
    clean_stderr(jobs["seen"]["retier"])
    live = submit(write_spec(tmp_path / "live.yaml", tiny_dataset, name=LIVE_NAME, team=TEAM,
                             priority="low", epochs=50, export=[]))
    cancelled = cli("cancel", live, "--reason", "table test")
    clean_stderr(cancelled)
    assert cancelled.stdout.startswith(f"cancelling {live} ("), cancelled.stdout
    assert wait_final(live, 300)["state"] == "Cancelled"


def test_cancelling_an_ended_job_says_it_ended_and_exits_1(jobs):
    out = cli("cancel", jobs["low"])
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"error: job: {jobs['low']} already ended: Completed; nothing to cancel")
    time.sleep(2)  # events reach the log a moment later: an ended job's cancel records none
    events = json_lines(cli("audit", "--job", jobs["low"], "--json").stdout)
    assert not [e for e in events if e["event"].endswith(".cancelled")], events


@pytest.mark.parametrize("flush", [False, True], ids=["prefect-exit-drain", "flushed"])
def test_an_event_left_queued_at_exit_is_what_prints_the_stray_line(yoloq_stack, flush):
    """The cause, reproduced: a process that emits an event and exits at once gets Prefect's
    exit-time drain warning; flushed first (as every command's client does), it does not."""
    code = ("from yoloq.records.events import emit_job_event\n"
            "from yoloq.commands._client import flush_events\n"
            "emit_job_event('probe', 'table-probe', 'vision')\n"
            f"{'flush_events()' if flush else 'pass'}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PREFECT_API_URL": yoloq_stack.api_url}, check=False)
    assert out.returncode == 0, out.stderr[-1500:]
    assert (STRAY in out.stderr) is not flush, out.stderr

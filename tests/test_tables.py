"""The table renderer (`yoloq.views.table`): fits the width by priority, never cuts an id,
`--wide` shows everything; and the small output points beside it (one epoch per preemption,
checkpoint labels). The CLI's tables on a real stack are in `test_tables_stack.py`."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from yoloq.views.table import ELLIPSIS, Column, cell_text, render, terminal_width

LONG_ID = "a-spec-name-of-forty-characters-exactly-" + "-abc123"  # 47 characters, as a job id
COLUMNS = (
    Column("job", ident=True, priority=0),
    Column("state", priority=1, min_width=7),
    Column("tier", priority=2, min_width=6),
    Column("team", priority=3, min_width=6),
    Column("reason", priority=5, min_width=12),
)
ROWS = [
    {"job": LONG_ID, "state": "running", "tier": "urgent", "team": "research-vision",
     "reason": "running since the last boundary, ahead of two normal jobs"},
    {"job": "short-1", "state": "waiting", "tier": "low", "team": None,
     "reason": "waiting: GPU 0 frees when job x stops at its epoch boundary"},
]


def lines(text: str) -> list[str]:
    return text.splitlines()


@pytest.mark.parametrize("width", [80, 90, 100, 120, 200])
def test_every_line_fits_and_every_id_is_whole(width):
    text = render(ROWS, COLUMNS, width=width)
    assert max(len(line) for line in lines(text)) <= width, text
    assert LONG_ID in text and "short-1" in text


def test_columns_shrink_least_important_first_with_an_ellipsis():
    natural = len(lines(render(ROWS, COLUMNS, wide=True))[1])
    text = render(ROWS, COLUMNS, width=natural - 10)
    first = lines(text)[1]
    assert first.endswith(ELLIPSIS) and "research-vision" in first, text  # the reason gave the 10


def test_columns_drop_by_priority_and_a_note_says_which():
    text = render(ROWS, COLUMNS, width=80)
    header = lines(text)[0].split()
    assert header[:3] == ["JOB", "STATE", "TIER"], text  # the reason (5) and team (3) went first
    assert "REASON" not in header and lines(text)[-1].startswith("(") and "--wide" in lines(text)[-1]
    assert "REASON" in lines(text)[-1]


def test_an_id_column_is_kept_when_everything_else_is_dropped():
    huge = "j" * 120
    text = render([{"job": huge, "state": "running"}], COLUMNS[:2], width=80)
    assert huge in text and "STATE" not in lines(text)[0]


def test_wide_shows_every_column_whole():
    text = render(ROWS, COLUMNS, width=80, wide=True)
    assert "research-vision" in text and ROWS[1]["reason"] in text
    assert not any(line.startswith("(") for line in lines(text))
    assert max(len(line) for line in lines(text)) > 80


def test_a_wrap_column_folds_instead_of_cutting():
    cols = (Column("job", ident=True, priority=0), Column("reason", priority=5, min_width=20, wrap=True))
    text = render(ROWS[:1], cols, width=80)
    assert ELLIPSIS not in text and max(len(line) for line in lines(text)) <= 80
    assert " ".join(" ".join(lines(text)[1:]).split()).endswith("ahead of two normal jobs")


def test_max_width_caps_a_column_but_not_with_wide():
    cols = (Column("job", ident=True), Column("reason", max_width=15, min_width=10))
    assert len(lines(render(ROWS[:1], cols, width=200))[1]) == len(LONG_ID) + 2 + 15
    assert ROWS[0]["reason"] in render(ROWS[:1], cols, width=200, wide=True)


def test_none_is_a_dash_and_times_are_to_the_second():
    assert cell_text(None) == "-" and cell_text(True) == "yes"
    assert cell_text(datetime(2026, 12, 4, 20, 55, 1, 123456, tzinfo=timezone.utc)) == "2026-12-04 20:55:01"
    assert cell_text("two\nlines") == "two lines"
    text = render(ROWS, COLUMNS, width=200)
    assert "None" not in text and " - " in lines(text)[2] + " "


def test_no_rows_print_the_empty_text():
    assert render([], COLUMNS, empty="(no jobs)") == "(no jobs)"


@pytest.mark.parametrize("columns, expected", [("120", 120), ("40", 80), ("", None), ("wide", None)])
def test_width_comes_from_columns_and_is_never_under_80(monkeypatch, columns, expected):
    monkeypatch.setenv("COLUMNS", columns)
    width = terminal_width()
    assert width == expected if expected is not None else width >= 80


def test_the_cli_tables_keep_their_ids():
    """Each command's own columns: the id a user types back is marked, so it is never cut."""
    from yoloq.commands import audit, demo, history, queue, quota, status, team, usage

    idents = {name: [c.key for c in mod.COLUMNS if c.ident] for name, mod in
              [("queue", queue), ("status", status), ("audit", audit), ("usage", usage), ("team", team),
               ("quota", quota)]}
    assert idents == {"queue": ["job"], "status": ["job_id"], "audit": ["job"], "usage": ["team", "job"],
                      "team": ["team"], "quota": ["team"]}
    assert [c.key for c in demo.DEMO_COLUMNS if c.ident] == ["job"]
    assert history.COLUMNS[-1].wrap  # its detail names jobs: folded, never cut


# ------------------------------------------------------------------ preemption epochs, labels

def test_a_preemption_names_one_epoch_the_one_the_job_resumes_after():
    """The scheduler asked when the last checkpoint it knew was epoch 130 (periodic checkpoints):
    its reason said "at epoch 131"; the segment stopped after epoch 137 and checkpointed there."""
    from yoloq.views.timeline import preempted_detail

    labels = {"yoloq.preempted_by": "hotfix-1", "yoloq.epoch": "137",
              "yoloq.preempt_reason": "preempted by job hotfix-1 (urgent) at epoch 131: ran 20 min"}
    detail = preempted_detail(labels)
    assert detail == "by hotfix-1 at epoch 137: preempted by job hotfix-1 (urgent): ran 20 min"
    assert "131" not in detail


@pytest.mark.parametrize("resumable, done, planned, kind, label", [
    pytest.param(True, 12, 100, "resumable", "resumable checkpoint at epoch 12 of 100", id="last.pt"),
    pytest.param(False, 100, 100, "final", "final checkpoint (100 epochs)", id="finished"),
    pytest.param(False, 12, 100, "weights", "checkpoint at epoch 12 of 100 (weights only, not resumable)",
                 id="stripped-mid-training"),
    pytest.param(False, 300, 0, "final", "final checkpoint (300 epochs)", id="no-plan-recorded"),
])
def test_a_mid_training_checkpoint_is_never_called_final(resumable, done, planned, kind, label):
    from yoloq.analysis.fingerprint import Fingerprint

    fp = Fingerprint(path="w.pt", family="yolov8", version="v8", scale="n", task="detect", nc=3,
                     names=("a", "b", "c"), model_yaml="yolov8n.yaml", resumable=resumable,
                     epoch=done - 1 if resumable else -1, epochs_done=done, epochs_planned=planned,
                     imgsz=64, ultralytics_version="8.4.190", date="", model_class="DetectionModel")
    assert (fp.kind, fp.label) == (kind, label)
    assert fp.to_dict()["label"] == label

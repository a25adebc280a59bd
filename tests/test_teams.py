"""The team store and `yoloq team`: tokens printed once, stored as argon2 hashes in a 0600 file,
rotated and removed tokens stop working at once. No stack needed."""

from __future__ import annotations

import json
import stat

import pytest

from yoloq import cli
from yoloq.records.teams import Caller, TeamStore, store_path


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path))
    monkeypatch.setenv("YOLOQ_PORT", "1")  # no stack answers here: limits are not shown
    return tmp_path


def test_add_prints_the_token_alone_on_the_last_line_and_stores_only_its_hash(home, capsys):
    assert cli.main(["team", "add", "vision", "--owner", "lead@example.org"]) == 0
    out = capsys.readouterr().out
    token = out.strip().splitlines()[-1]
    assert token.startswith("yq_") and " " not in token
    path = store_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert token not in text and token.split("_", 2)[2] not in text
    entry = json.loads(text)["teams"]["vision"]
    assert entry["token_hash"].startswith("$argon2") and entry["owner"] == "lead@example.org"
    assert TeamStore(path).caller(token) == Caller("vision", "default", False)


def test_rotate_invalidates_the_old_token_and_remove_the_new_one(home, capsys):
    store = TeamStore(store_path(home))
    old = store.add("vision")
    assert store.caller(old) is not None  # cached as valid ...
    assert cli.main(["team", "rotate", "vision"]) == 0
    new = capsys.readouterr().out.strip().splitlines()[-1]
    assert store.caller(old) is None  # ... and refused at once after the rotation
    assert store.caller(new) == Caller("vision", "default", False)
    assert cli.main(["team", "remove", "vision"]) == 0
    assert store.caller(new) is None


@pytest.mark.parametrize("token", [None, "", "yq_", "nonsense", "yq_abc_def", "Bearer x"],
                         ids=["none", "empty", "prefix", "shape", "unknown-id", "header"])
def test_malformed_or_unknown_tokens_are_nobody(home, token):
    store = TeamStore(store_path(home))
    store.add("vision")
    assert store.caller(token) is None


def test_admin_token_and_list_show_no_secrets(home, capsys):
    assert cli.main(["team", "add", "ops", "--admin", "--label", "alice"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert TeamStore(store_path(home)).caller(token) == Caller("ops", "alice", True)
    assert cli.main(["team", "list", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [(r["team"], r["admin"], r["label"]) for r in rows] == [("ops", True, "alice")]
    assert "token_hash" not in captured.out and token not in captured.out
    assert "weights, caps and quotas are not shown" in captured.err


@pytest.mark.parametrize("argv, line", [
    (["team", "add", "Vision"], "error: team: 'Vision' is not a team name"),
    (["team", "rotate", "nobody"], "error: team: no team named 'nobody'"),
    (["team", "remove", "nobody"], "error: team: no team named 'nobody'"),
    (["team", "add", "vision", "--weight", "0"], "error: weight: 0.0 is not a positive weight"),
], ids=["bad-name", "rotate-unknown", "remove-unknown", "zero-weight"])
def test_bad_input_is_one_line_exit_2(home, capsys, argv, line):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and len(err.strip().splitlines()) == 1


def test_a_team_is_added_once(home, capsys):
    assert cli.main(["team", "add", "vision"]) == 0
    assert cli.main(["team", "add", "vision"]) == 2
    assert "error: team: 'vision' already exists" in capsys.readouterr().err

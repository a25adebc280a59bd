"""The team store and `yoloq team`: tokens printed once, stored as argon2 hashes in a 0600 file,
rotated and removed tokens stop working at once. No stack needed."""

from __future__ import annotations

import json
import stat

import pytest

from yoloq import cli
from yoloq.records import teams
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
    rows = [json.loads(line) for line in captured.out.splitlines()]  # JSON Lines
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


def test_a_repeated_wrong_secret_is_refused_from_the_cache_until_the_store_changes(home):
    store = TeamStore(store_path(home))
    good = store.add("vision")
    wrong = good[:-4] + ("aaaa" if not good.endswith("aaaa") else "bbbb")  # valid id, wrong secret
    assert store.caller(wrong) is None and store.verifications == 1
    for _ in range(5):
        assert store.caller(wrong) is None
    assert store.verifications == 1  # refused from the cache: no argon2 verification per try
    assert all(wrong not in key for key in store._refused)  # keyed by a digest, not the token
    store.add("audio")  # any change of teams.json drops the cache
    assert store.caller(wrong) is None and store.verifications == 2
    assert store.caller(good) is not None and store.verifications == 3


def test_a_cached_refusal_is_dropped_when_the_store_changes_and_expires(home):
    """A token refused while its entry held another hash is valid once the file is fixed,
    at once; a refusal also expires after REFUSED_TTL_S (an injected clock, no waiting)."""
    now = [1000.0]
    store = TeamStore(store_path(home), clock=lambda: now[0])
    token = store.add("vision")
    right = store.get("vision").token_hash
    store._edit(lambda t: setattr(t["vision"], "token_hash", teams._hasher().hash("other")))
    assert store.caller(token) is None and store.caller(token) is None
    assert store.verifications == 1
    store._edit(lambda t: setattr(t["vision"], "token_hash", right))
    assert store.caller(token) == Caller("vision", "default", False)  # not the cached refusal
    assert store.verifications == 2
    wrong = token + "x"
    assert store.caller(wrong) is None and store.caller(wrong) is None
    assert store.verifications == 3
    now[0] += teams.REFUSED_TTL_S + 1  # past its lifetime: verified again
    assert store.caller(wrong) is None and store.verifications == 4


def test_the_refusal_cache_is_bounded(home, monkeypatch):
    monkeypatch.setattr(teams, "REFUSED_MAX", 3)
    store = TeamStore(store_path(home))
    token = store.add("vision")
    for i in range(5):
        assert store.caller(f"{token}{i}") is None
    assert len(store._refused) == 3
    assert store.caller(f"{token}0") is None and store.verifications == 6  # the oldest was forgotten

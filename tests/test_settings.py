"""One settings object: every `YOLOQ_*` variable is declared in `yoloq.settings`, typed, and read
only through it; a bad value is one line naming the variable; the reference page is generated.

Pure tests (no server), except the CLI ones, which run the real `yoloq` command in a subprocess.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("yoloq", "flows", "blocks", "work_pools")
SETTINGS_MODULE = ROOT / "yoloq" / "settings.py"
REFERENCE = ROOT / "docs" / "reference" / "settings.md"


# -- the rule: no other reader of a YOLOQ_* variable -------------------------------------------

def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "YOLOQ_..."` assignments (reads often go through such a constant)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or a bare `environ` (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _name_of(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The variable name an expression spells: a literal, a module constant, or `mod.CONSTANT`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr) or (node.attr if node.attr.startswith("YOLOQ_") else None)
    return None


def env_reads(source: str, constants: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, variable) for each read of a `YOLOQ_*` variable from the process environment."""
    tree = ast.parse(source)
    constants = {**(constants or {}), **_string_constants(tree)}
    reads = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and _is_environ(func.value):
                key = node.args[0] if func.attr != "setdefault" else None
            elif (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                    isinstance(func, ast.Name) and func.id == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(_is_environ(c) for c in node.comparators):
            key = node.left
        name = _name_of(key, constants) if key is not None else None
        if name and name.startswith("YOLOQ_"):
            reads.append((node.lineno, name))
    return reads


def _project_constants() -> dict[str, str]:
    """Every module-level string constant of the product (`credentials.TOKEN_ENV` and the like)."""
    found: dict[str, str] = {}
    for path in _product_files():
        found.update(_string_constants(ast.parse(path.read_text())))
    return found


def _product_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("snippet", [
    pytest.param('import os\nx = os.environ.get("YOLOQ_PORT")', id="get"),
    pytest.param('import os\nx = os.environ["YOLOQ_PORT"]', id="subscript"),
    pytest.param('import os\nx = os.getenv("YOLOQ_PORT", "1")', id="getenv"),
    pytest.param('import os\nENV = "YOLOQ_PORT"\nx = os.environ.get(ENV)', id="through-a-constant"),
    pytest.param('import os\nx = "YOLOQ_PORT" in os.environ', id="membership"),
    pytest.param('from os import environ\nx = environ.get("YOLOQ_PORT")', id="bare-environ"),
])
def test_the_scanner_sees_a_read(snippet):
    assert env_reads(snippet) != []


@pytest.mark.parametrize("snippet", [
    pytest.param('import os\nos.environ["YOLOQ_HOME"] = "x"', id="a-write-for-children"),
    pytest.param('import os\nos.environ.setdefault("YOLOQ_HOME", "x")', id="setdefault-writes"),
    pytest.param('import os\nx = os.environ.get("PREFECT_API_URL")', id="not-yoloq"),
    pytest.param('x = proc.environ().get("YOLOQ_HOME")', id="another-process"),
])
def test_the_scanner_ignores_what_is_not_a_read(snippet):
    assert env_reads(snippet) == []


def test_no_module_reads_a_yoloq_variable_but_the_settings_module():
    constants = _project_constants()
    offenders = [f"{path.relative_to(ROOT)}:{line}: {name}"
                 for path in _product_files() if path != SETTINGS_MODULE
                 for line, name in env_reads(path.read_text(), constants)]
    assert offenders == [], ("read these through `yoloq.settings.settings()` (declare the variable "
                             "there if it is new):\n" + "\n".join(offenders))


def test_every_yoloq_name_in_the_product_is_declared():
    """A `YOLOQ_*` string in the product that names no declared variable is a variable read or
    written unseen (or a stale name): both are wrong. (`YOLOQ_TUNED` is a Python name.)"""
    import re

    from yoloq.settings import variables

    declared = {v.env for v in variables()}
    name = re.compile(r"^YOLOQ_[A-Z0-9_]+$")
    named = {f"{node.value} ({path.relative_to(ROOT)}:{node.lineno})"
             for path in _product_files() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and name.match(node.value)
             and node.value not in declared}
    assert named == set(), "declare these in yoloq/settings.py"


# -- typed parsing -------------------------------------------------------------------------------

@pytest.mark.parametrize("env, value, attr, expected", [
    pytest.param("YOLOQ_PORT", "4300", "port", 4300, id="int"),
    pytest.param("YOLOQ_PORT", "", "port", None, id="empty-is-unset"),
    pytest.param("YOLOQ_DEBUG", "1", "debug", True, id="bool-1"),
    pytest.param("YOLOQ_USE_BLOCKS", "0", "use_blocks", False, id="bool-0"),
    pytest.param("YOLOQ_CHECKPOINT_EVERY", "AUTO", "checkpoint_every", "auto", id="auto-any-case"),
    pytest.param("YOLOQ_CHECKPOINT_EVERY", "3", "checkpoint_every", 3, id="epochs"),
    pytest.param("YOLOQ_WAKE", " Poll ", "wake", "poll", id="choice-trimmed"),
    pytest.param("YOLOQ_PROFILE", "cluster", "profile", "cluster", id="profile"),
    pytest.param("YOLOQ_MIN_RUNTIME_S", "0", "policy_min_runtime_s", 0.0, id="policy-override"),
    pytest.param("YOLOQ_TARGET_SEGMENT_S", "120.5", "target_segment_s", 120.5, id="float"),
])
def test_values_are_parsed_to_their_type(monkeypatch, env, value, attr, expected):
    from yoloq.settings import settings

    monkeypatch.setenv(env, value)
    assert getattr(settings(), attr) == expected


def test_defaults_apply_when_unset(monkeypatch):
    from yoloq.settings import settings

    for name in ("YOLOQ_API_HOST", "YOLOQ_DATASET_CACHE_GB", "YOLOQ_WARM_START", "YOLOQ_MIN_RUNTIME_S"):
        monkeypatch.delenv(name, raising=False)
    current = settings()
    assert (current.api_host, current.dataset_cache_gb, current.warm_start_enabled) == ("127.0.0.1", 50.0, True)
    assert current.policy_min_runtime_s is None  # unset: the block or Policy decides


def test_a_changed_variable_is_read_again(monkeypatch):
    from yoloq.settings import settings

    monkeypatch.setenv("YOLOQ_NODE_TIMEOUT_S", "12")
    assert settings().node_timeout_s == 12
    monkeypatch.setenv("YOLOQ_NODE_TIMEOUT_S", "13")
    assert settings().node_timeout_s == 13


@pytest.mark.parametrize("env, value, expect", [
    pytest.param("YOLOQ_PORT", "abc", "a TCP port", id="port-not-int"),
    pytest.param("YOLOQ_PORT", "70000", "a TCP port", id="port-out-of-range"),
    pytest.param("YOLOQ_DEBUG", "maybe", "1 or 0", id="bool"),
    pytest.param("YOLOQ_WAKE", "sometimes", "events or poll", id="choice"),
    pytest.param("YOLOQ_CHECKPOINT_EVERY", "0", "auto or a whole number", id="epochs-zero"),
    pytest.param("YOLOQ_NODE_TIMEOUT_S", "-1", "a number of seconds", id="negative-timeout"),
    pytest.param("YOLOQ_MIN_RUNTIME_S", "soon", "a number of seconds", id="policy-override"),
])
def test_a_bad_value_is_one_error_naming_the_variable(monkeypatch, env, value, expect):
    from yoloq.settings import SettingsError, settings

    monkeypatch.setenv(env, value)
    with pytest.raises(SettingsError) as caught:
        settings()
    assert caught.value.field == env and repr(value) in caught.value.problem
    assert expect in caught.value.line() and "\n" not in caught.value.line()


# -- through the real CLI and entry points ----------------------------------------------------------

def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.parametrize("args, env, value", [
    pytest.param(["-m", "yoloq.cli", "up"], "YOLOQ_PORT", "abc", id="up-port"),
    pytest.param(["-m", "yoloq.cli", "status"], "YOLOQ_DATASET_CACHE_GB", "lots", id="status-cache"),
    pytest.param(["-m", "yoloq.cli", "policy", "show"], "YOLOQ_GRACE_S", "long", id="policy-grace"),
    pytest.param(["-m", "yoloq.api"], "YOLOQ_API_PORT", "x", id="api-entry-point"),
    pytest.param(["-m", "work_pools.run_worker"], "YOLOQ_NODE_TIMEOUT_S", "soon", id="node-agent-entry-point"),
])
def test_a_bad_value_stops_start_up_with_one_line(args, env, value):
    out = _run(args, **{env: value})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"error: {env}: must be ") and repr(value) in lines[0]


def test_a_policy_override_out_of_range_stops_up_before_anything_starts(tmp_path):
    home = tmp_path / "home"
    out = _run(["-m", "yoloq.cli", "--home", str(home), "up"], YOLOQ_MIN_RUNTIME_S="-5", YOLOQ_PORT="")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: YOLOQ_MIN_RUNTIME_S: ") and "Traceback" not in out.stderr
    assert not (home / "pids" / "server.pid").exists(), "nothing may start"


# -- the policy's keys, defaults and overrides come from one place ---------------------------------

def test_every_policy_key_has_one_override_and_no_override_is_orphaned():
    from blocks.policy import policy_keys
    from yoloq.settings import policy_env_names

    per_team = {"team_weights", "quotas"}  # set per team (`yoloq team`, `yoloq quota`), no variable
    assert set(policy_env_names()) == set(policy_keys()) - per_team


def test_the_block_derives_its_keys_and_defaults_from_policy():
    import dataclasses

    from blocks.policy import GRACE_KEYS, PolicySettings, SchedulingPolicy, policy_keys
    from work_pools.policy.model import Policy

    policy_fields = {f.name for f in dataclasses.fields(Policy)}
    assert set(policy_keys()) - set(GRACE_KEYS) <= policy_fields
    block, default = SchedulingPolicy(), Policy()
    for key in set(policy_keys()) - set(GRACE_KEYS):
        value = getattr(default, key)
        assert getattr(block, key) == (value.label if hasattr(value, "label") else value), key
    assert (block.min_grace_s, block.grace_epochs) == (PolicySettings().min_grace_s, PolicySettings().grace_epochs)


# -- the generated reference ---------------------------------------------------------------------

def test_the_reference_page_is_current():
    from yoloq.settings import reference_markdown

    assert REFERENCE.exists() and REFERENCE.read_text() == reference_markdown(), (
        "docs/reference/settings.md is stale; regenerate it: "
        "python -m yoloq.settings > docs/reference/settings.md")


def test_the_reference_lists_every_variable_public_before_internal():
    from yoloq.settings import reference_markdown, variables

    text = reference_markdown()
    public, internal = text.split("## Internal")
    for v in variables():
        assert f"`{v.env}`" in (internal if v.internal else public), v.env

"""The checked-in reference pages are what the code generates now (quick tier: no server)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from yoloq.cli import COMMANDS, build_parser
from yoloq.domain.spec import JobSpec
from yoloq.ops import reference

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_checked_in_page_is_current(page: str):
    path = ROOT / page
    assert path.is_file(), f"{page} is missing: run `{reference.REGENERATE}` and commit it"
    assert path.read_text(encoding="utf-8") == reference.PAGES[page](), (
        f"{page} is stale (the code changed): run `{reference.REGENERATE}` and commit the page")


def test_check_names_a_stale_page_and_the_command(tmp_path: Path):
    """`--check` on a copy with one edited page exits 1 and names that page and the fix."""
    for page, render in reference.PAGES.items():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text(render(), encoding="utf-8")
    assert reference.main(["--check", "--root", str(tmp_path)]) == 0
    edited = tmp_path / "docs/reference/cli.md"
    edited.write_text(edited.read_text() + "a hand edit\n")
    done = subprocess.run([sys.executable, "-m", "yoloq.ops.reference", "--check", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: docs/reference/cli.md is stale (fix: run "
                                   "`python -m yoloq.ops.reference` and commit the page)")


def test_write_creates_missing_pages(tmp_path: Path):
    assert sorted(reference.write_pages(tmp_path)) == sorted(reference.PAGES)
    assert reference.stale_pages(tmp_path) == []
    assert reference.write_pages(tmp_path) == []  # nothing changed: nothing rewritten


def test_cli_page_has_every_command_and_option():
    text = reference.cli_markdown()
    for name in COMMANDS:
        assert f"## `yoloq {name}`" in text, name
    for action in _all_actions(build_parser()):
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in text, option


def test_rest_page_has_every_route():
    from yoloq.api.app import create_app

    text = reference.rest_markdown()
    for path, operations in create_app().openapi()["paths"].items():
        for method in operations:
            assert f"### {method.upper()} {path}\n" in text, (method, path)


def test_job_spec_page_has_every_field_and_its_default():
    text = reference.job_spec_markdown()
    for name, field in JobSpec.model_fields.items():
        assert f"| `{name}` |" in text, name
    assert '| `epochs` | integer (>= 1, <= 10000) | no | `10` |' in text


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _all_actions(sub)
        else:
            found.append(action)
    return found

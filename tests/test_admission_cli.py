"""The command line: one-line errors, --home anywhere, --version, --json everywhere, no state on reads."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from yoloq import __version__, cli
from yoloq.datasets.synth import synth_dataset

YOLOQ = [sys.executable, "-m", "yoloq.cli"]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, _ = _run(["--version"], capsys)
    assert code == 0 and out.strip() == f"yoloq {__version__}"


@pytest.mark.parametrize("argv", [
    pytest.param(["--home", "{home}", "status"], id="before"),
    pytest.param(["status", "--home", "{home}"], id="after"),
    pytest.param(["status", "--home={home}"], id="equals"),
    pytest.param(["--home", "{home}", "dataset", "updated", "x.yaml"], id="before-nested"),
    pytest.param(["dataset", "updated", "x.yaml", "--home", "{home}"], id="after-nested"),
])
def test_home_is_read_anywhere(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("YOLOQ_HOME", raising=False)
    home = tmp_path / "elsewhere"
    (tmp_path / "x.yaml").write_text("names: [a]\n")
    code, _, err = _run([a.format(home=home) for a in argv], capsys)
    # the stack is not running there: the error names the home we gave, so it was used
    assert code == 2 and f"{home}" in err and len(err.strip().splitlines()) == 1


def test_home_named_like_a_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("YOLOQ_HOME", raising=False)
    code, _, err = _run(["--home", "analyse", "status"], capsys)
    assert code == 2 and f"no yoloq state folder at {tmp_path / 'analyse'}" in err


def test_every_command_takes_json():
    def parsers(parser: argparse.ArgumentParser):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield parser
        for action in subs:
            for child in action.choices.values():
                yield from parsers(child)

    top = cli.build_parser()
    leaves = list(parsers(top))
    assert len(leaves) >= len(cli.COMMANDS)
    missing = [p.prog for p in leaves if "--json" not in p._option_string_actions]
    assert missing == []


@pytest.fixture()
def spec(tmp_path) -> Path:
    synth_dataset(tmp_path / "ds", train=4, val=2, imgsz=32, seed=0, relative_path=True)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "j", "team": "t", "model": "yolov8n.yaml", "data": "ds/data.yaml",
                                    "epochs": 3, "imgsz": 64, "batch": 4}))
    return path


def test_reads_create_no_state_folder(spec, tmp_path):
    """A real process in a fresh folder: read commands leave no ./.yoloq behind."""
    work = tmp_path / "fresh"
    work.mkdir()
    env = {k: v for k, v in __import__("os").environ.items() if k != "YOLOQ_HOME"}
    for argv in (["analyse", str(spec)], ["status"], ["queue", "--json"], ["audit"], ["history", "x"],
                 ["simulate"], ["--version"]):
        done = subprocess.run(YOLOQ + argv, cwd=work, capture_output=True, text=True, timeout=120, env=env,
                              check=False)
        assert done.returncode in (0, 2), done.stderr
        assert "Traceback" not in done.stderr
    assert list(work.iterdir()) == []


def test_closed_pipe_ends_quietly(spec):
    """`yoloq analyse ... | head -1`: the reader is gone before the output is written (its end of
    the pipe is closed at once, so no reader exists): exit 141, nothing on stderr."""
    proc = subprocess.Popen(YOLOQ + ["analyse", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == cli.SIGPIPE_EXIT, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_usage_errors_are_one_line_exit_2(capsys):
    code, out, err = _run(["analyse"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: ")

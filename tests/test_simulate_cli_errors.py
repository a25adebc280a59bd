"""`yoloq simulate` refuses bad input with one line and exit 2: no traceback, no hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from work_pools.simulate import generate, write_trace
from yoloq.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def trace(tmp_path) -> Path:
    path = tmp_path / "t.csv"
    write_trace(path, generate(12, "light", seed=1))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _bad_files(tmp_path: Path, trace: Path) -> dict[str, tuple[list[str], str]]:
    """Case id -> (argv after `simulate`, expected text in the one error line)."""
    lines = _lines(trace)
    header, first = lines[0], lines[1].split(",")
    negative = ",".join(first[:6] + ["-100"] + first[7:])
    cases = {
        "binary.csv": (bytes(range(256)) * 4, "not a UTF-8 CSV"),
        "empty.csv": (b"", "is empty"),
        "header-only.csv": ((header + "\n").encode(), "no jobs"),
        "negative.csv": ((header + "\n" + negative + "\n").encode(), "duration_s must be > 0"),
        "duplicate.csv": (("\n".join([header, lines[1], lines[1]]) + "\n").encode(),
                          "duplicate job_id"),
        "zero-gpus.csv": ((header + "\n" + ",".join(first[:4] + ["0"] + first[5:]) + "\n").encode(),
                          "gpus must be at least 1"),
        "syntax.yaml": (b"gpus: [\n  {type: A100-80GB\n", "YAML syntax error"),
        "zero.yaml": (b"gpus:\n  - {type: A100-80GB, count: 0}\n", "count must be a whole number"),
        "none.yaml": (b"gpus: 0\n", "expected `gpus:"),
    }
    out = {}
    for name, (data, expected) in cases.items():
        (tmp_path / name).write_bytes(data)
        argv = ([str(trace), "--cluster", str(tmp_path / name)] if name.endswith(".yaml")
                else [str(tmp_path / name)])
        out[name] = (argv, expected)
    return out


ARG_CASES = [
    pytest.param(["--segment-s", "-5"], "--segment-s: must be", id="negative-segment"),
    pytest.param(["--segment-s", "0"], "--segment-s: must be", id="zero-segment"),
    pytest.param(["--segment-s", "inf"], "--segment-s: must be", id="infinite-segment"),
    pytest.param(["--cluster", "0xA100-80GB"], "has no GPUs", id="zero-gpu-cluster"),
]


@pytest.mark.parametrize("extra, expected", ARG_CASES)
def test_bad_arguments_are_one_line(trace, capsys, extra, expected):
    assert main(["simulate", str(trace), *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["binary.csv", "empty.csv", "header-only.csv", "negative.csv",
                                  "duplicate.csv", "zero-gpus.csv", "syntax.yaml", "zero.yaml",
                                  "none.yaml"])
def test_bad_files_are_one_line(tmp_path, trace, capsys, name):
    argv, expected = _bad_files(tmp_path, trace)[name]
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_generate_into_a_missing_folder(tmp_path, capsys):
    assert main(["simulate", "--generate", str(tmp_path / "nonexistent" / "x.csv"),
                 "--jobs", "5"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nonexistent").exists()


def test_the_simulator_itself_refuses_a_non_positive_segment():
    from work_pools.policy import yoloq
    from work_pools.simulate import Simulator, parse_cluster

    with pytest.raises(ValueError, match="segment_s"):
        Simulator(generate(3, "light"), parse_cluster("1xV100-32GB"), yoloq(), segment_s=-5)


@pytest.mark.parametrize("args, expected", [
    pytest.param(["--segment-s", "-5"], "--segment-s", id="negative-segment-no-hang"),
    pytest.param(["--generate", "/nonexistent/x.csv"], "--generate", id="generate-missing-folder"),
])
def test_real_process_exits_2_quickly(trace, args, expected):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "yoloq.cli", "simulate"]
    argv += args if args[0] == "--generate" else [str(trace), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=trace.parent)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

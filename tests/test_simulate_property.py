"""Property-style: random mutations of a valid trace, cluster file and arguments fed to
`yoloq simulate` exit 0 or 2, print no traceback, and never hang (a per-case alarm).

Mutations: cells replaced by junk (empty, negative, huge, NaN, text, unicode, a comma), rows
dropped or duplicated, header renamed, bytes truncated or flipped; cluster YAML with bad
counts, names and syntax; `--segment-s`, `--weights` and `--policy` values drawn from a
mix of good and bad. Each case runs in-process through `yoloq.cli.main`; a handful also
through a real subprocess.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from work_pools.simulate import generate, write_trace
from yoloq.cli import main

CASES = 160
SUBPROCESS_EVERY = 40
ALARM_S = 20
JUNK = ["", "-1", "0", "1e308", "nan", "abc", "Ünïcode", "1,2", "99999999999999999999", " ", "-0.5"]
ARGS = [["--segment-s", "0"], ["--segment-s", "-5"], ["--segment-s", "nan"], ["--segment-s", "60"],
        ["--weights", "a=2,b=x"], ["--weights", "=1"], ["--weights", "vision=2"],
        ["--policy", "fifo"], ["--policy", "las"], ["--no-eta"], []]


def _mutate_trace(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    header, rows = lines[0], lines[1:]
    kind = rng.choice(["cell", "cell", "drop", "dup", "header", "truncate", "flip", "shuffle"])
    if kind == "cell" and rows:
        i = rng.randrange(len(rows))
        cells = rows[i].split(",")
        cells[rng.randrange(len(cells))] = rng.choice(JUNK)
        rows[i] = ",".join(cells)
    elif kind == "drop" and rows:
        rows.pop(rng.randrange(len(rows)))
    elif kind == "dup" and rows:
        rows.append(rng.choice(rows))
    elif kind == "header":
        cols = header.split(",")
        cols[rng.randrange(len(cols))] = rng.choice(["", "x", "job", "durationS"])
        header = ",".join(cols)
    elif kind == "shuffle":
        rng.shuffle(rows)
    out = "\n".join([header, *rows]) + "\n"
    if kind == "truncate":
        out = out[: rng.randrange(len(out))]
    if kind == "flip" and out:
        i = rng.randrange(len(out))
        out = out[:i] + chr(rng.randrange(0, 0x3000)) + out[i + 1:]
    return out


def _cluster(rng: random.Random, folder: Path) -> list[str]:
    choice = rng.choice(["none", "inline", "yaml", "badyaml"])
    if choice == "inline":
        return ["--cluster", rng.choice(["2xA100-80GB", "0xV100-32GB", "3xNOPE", "x", "2xA100-80GB,1xT4-16GB"])]
    if choice in ("yaml", "badyaml"):
        path = folder / "cluster.yaml"
        path.write_text(rng.choice(["gpus:\n  - {type: A100-80GB, count: 2}\n", "gpus: [\n",
                                    "gpus:\n  - {type: A100-80GB, count: -1}\n", "- 1\n- 2\n",
                                    "{}\n"]) if choice == "badyaml" else
                        "gpus:\n  - {type: A100-80GB, count: 2}\n  - {type: V100-32GB, count: 1}\n")
        return ["--cluster", str(path)]
    return []


def _case(seed: int, folder: Path, base: str) -> list[str]:
    rng = random.Random(seed)
    trace = folder / f"t{seed}.csv"
    data = _mutate_trace(rng, base) if rng.random() < 0.8 else base
    trace.write_bytes(data.encode("utf-8", "surrogatepass"))
    return ["simulate", str(trace), "--json", *rng.choice(ARGS), *_cluster(rng, folder)]


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("trace") / "base.csv"
    write_trace(path, generate(10, "light", seed=3))
    return path.read_text()


@pytest.mark.parametrize("seed", range(CASES))
def test_simulate_exits_0_or_2_without_traceback_or_hang(seed, base_trace, tmp_path, capsys):
    argv = _case(seed, tmp_path, base_trace)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        code = main(argv)
    except _Hang:
        pytest.fail(f"hang over {ALARM_S} s: {argv}")
    except SystemExit as exc:
        code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert code in (0, 2), (code, argv, err[-500:])
    assert "Traceback" not in err, err[-2000:]
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    if seed % SUBPROCESS_EVERY == 0:
        done = subprocess.run([sys.executable, "-m", "yoloq.cli", *argv], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == code and "Traceback" not in done.stderr, done.stderr[-2000:]

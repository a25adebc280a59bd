"""Property: whatever a spec or dataset looks like, `yoloq analyse` answers 0 or 2, in one line, quickly.

Random mutations (seeded, so every failure names a reproducible case) of a valid spec and a
small valid dataset go through the CLI's `main()` in-process; a handful go through a real
subprocess too. Asserted for each: exit code 0 or 2; on 2, exactly one `error: ` line on
stderr; never a traceback; never longer than CASE_TIMEOUT_S (a hang fails the case).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import signal
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from yoloq import cli
from yoloq.analysis.ultralytics_cfg import tables
from yoloq.datasets.synth import synth_dataset

CHUNKS = 12
CASES_PER_CHUNK = 40  # CHUNKS * CASES_PER_CHUNK in-process cases
SUBPROCESS_SEEDS = (3, 17, 101, 202, 303, 404)
CASE_TIMEOUT_S = 20
BASE_SPEC = {"name": "prop-job", "team": "vision", "priority": "normal", "model": "yolov8n.yaml",
             "data": "ds/data.yaml", "epochs": 3, "imgsz": 64, "batch": 4}
WEIRD: list[Any] = [None, True, False, 0, -1, 1, 3, 32, 1.5, -0.5, 1e300, float("inf"), float("nan"), "", " ",
                    "x", "yolov8n.pt", "yolo11x.yaml", "coco8.yaml", "../..", "/", "a" * 300, "null", "été",
                    [], [1], ["a", None], [[1, 2]], {}, {"a": 1}, {"nested": {"x": [1]}}, 10 ** 20, "0,1"]
SPEC_KEYS = list(BASE_SPEC) + ["segment_epochs", "export", "train_args"]
DATA_KEYS = ["path", "train", "val", "test", "names", "nc"]


@pytest.fixture(scope="module")
def base_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("prop") / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, nc=3, seed=0, relative_path=True)
    return root


def _weird(rng: random.Random) -> Any:
    if rng.random() < 0.2:
        return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 12)))
    return rng.choice(WEIRD)


def _mutate_spec(rng: random.Random, spec: dict[str, Any]) -> str:
    kind = rng.choice(["set", "delete", "add", "train_arg", "train_arg", "train_args_shape"])
    if kind == "set":
        key = rng.choice(SPEC_KEYS)
        spec[key] = _weird(rng)
    elif kind == "delete" and spec:
        key = rng.choice(sorted(spec))
        del spec[key]
    elif kind == "add":
        key = rng.choice(["tier", "lr0", "epoch", "weights", "".join(rng.choices(string.ascii_lowercase, k=5))])
        spec[key] = _weird(rng)
    elif kind == "train_arg":
        args = spec.setdefault("train_args", {}) if isinstance(spec.get("train_args", {}), dict) else {}
        key = rng.choice(sorted(tables().defaults) + ["bogus_arg"])
        args[key] = _weird(rng) if rng.random() < 0.7 else tables().defaults.get(key)
        spec["train_args"] = args
    else:
        spec["train_args"] = rng.choice([[], "lr0=0.1", None, {1: 2}, {"": None}])
    return f"spec {kind}"


def _mutate_text(rng: random.Random, text: str) -> str:
    """Character-level damage to the spec file."""
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(len(chars) + 1)
        action = rng.choice(["insert", "delete", "replace", "duplicate-line", "truncate"])
        if action == "insert":
            chars.insert(position, rng.choice(":-[]{}&*!|>'\"%@`#,\t\n "))
        elif action == "delete" and chars:
            del chars[min(position, len(chars) - 1)]
        elif action == "replace" and chars:
            chars[min(position, len(chars) - 1)] = rng.choice(string.printable)
        elif action == "duplicate-line":
            lines = "".join(chars).splitlines(keepends=True)
            if lines:
                lines.insert(rng.randrange(len(lines)), rng.choice(lines))
            chars = list("".join(lines))
        else:
            chars = chars[:position]
    return "".join(chars)


def _mutate_dataset(rng: random.Random, ds: Path) -> str:
    kind = rng.choice(["data_set", "data_del", "label", "label", "delete", "bytes", "symlink", "names"])
    data_yaml = ds / "data.yaml"
    data = _readable(data_yaml)
    if data is None and kind in ("data_set", "data_del", "names"):
        kind = "label"  # an earlier mutation already broke the data YAML itself
    if kind == "data_set":
        data[rng.choice(DATA_KEYS)] = _weird(rng)
    elif kind == "data_del":
        data.pop(rng.choice(DATA_KEYS), None)
    elif kind == "names":
        data["names"] = rng.choice([["a", "a", "b"], ["a", None, "b"], {0: "a", 2: "b"}, ["", "b", "c"],
                                    list(range(3)), {"x": "a"}, "abc"])
    elif kind == "label":
        labels = sorted((ds / "labels").rglob("*.txt"))
        tokens = ["0", "1", "2", "3", "-1", "0.5", "1.5", "nan", "inf", "x", "1e9", "0.2", "0.1"]
        rows = [" ".join(rng.choice(tokens) for _ in range(rng.choice([1, 4, 5, 5, 5, 6, 7, 9])))
                for _ in range(rng.randint(0, 4))]
        target = rng.choice(labels) if labels else ds / "labels" / "train" / "train_00000.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(rows) + rng.choice(["", "\n", "\r\n"]))
    elif kind == "delete":
        victims = sorted(p for p in ds.rglob("*") if p != data_yaml)
        victim = rng.choice(victims)
        shutil.rmtree(victim) if victim.is_dir() and not victim.is_symlink() else victim.unlink()
    elif kind == "bytes":
        target = rng.choice([data_yaml, *sorted((ds / "labels").rglob("*.txt"))] if (ds / "labels").is_dir()
                            else [data_yaml])
        target.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
        return f"dataset {kind} {target.name}"
    else:
        folder = rng.choice([ds / "images" / "train", ds / "images" / "val", ds / "labels" / "train", ds])
        link = folder / rng.choice(["loop", "self", "up"])
        if not link.exists() and not link.is_symlink():
            link.symlink_to(rng.choice([folder, link, folder.parent, Path("/nonexistent")]))
    if data is not None:
        data_yaml.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return f"dataset {kind}"


def _readable(path: Path) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def build(seed: int, base_dataset: Path, where: Path) -> tuple[list[str], list[str]]:
    """Write case `seed` under `where`; return (argv, what was mutated)."""
    rng = random.Random(seed)
    shutil.copytree(base_dataset, where / "ds", symlinks=True)
    spec: dict[str, Any] = {**BASE_SPEC}
    done = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            done.append(_mutate_spec(rng, spec))
        else:
            try:
                done.append(_mutate_dataset(rng, where / "ds"))
            except (OSError, IndexError):  # an earlier mutation removed what this one needed
                done.append("dataset mutation skipped")
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    if rng.random() < 0.2:
        text = _mutate_text(rng, text)
        done.append("text damage")
    suffix = ".json" if rng.random() < 0.1 else ".yaml"
    path = where / f"job{suffix}"
    path.write_text(text if suffix == ".yaml" else _as_json(spec, text))
    extra = rng.choice([[], [], ["--json"], ["--gpu", rng.choice(["T4", "A100", "H200-141GB", "cpu", "x"])]])
    return ["analyse", str(path), *extra], done


def _as_json(spec: dict[str, Any], fallback: str) -> str:
    import json

    try:
        return json.dumps(spec, allow_nan=True)
    except (TypeError, ValueError):
        return fallback


class CaseTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CaseTimeout()


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


def check_outcome(code: Any, out: str, err: str) -> str | None:
    """None when the outcome obeys the property, else what is wrong."""
    if code not in (0, 2):
        return f"exit code {code!r}"
    if "Traceback" in out + err:
        return "traceback"
    if code == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return f"not one error line: {err!r}"
    return None


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_mutations_answer_0_or_one_error_line(chunk, base_dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("YOLOQ_WEIGHTS_DIR", raising=False)
    outcomes = {0: 0, 2: 0}
    for seed in range(chunk * CASES_PER_CHUNK, (chunk + 1) * CASES_PER_CHUNK):
        where = tmp_path / f"case{seed}"
        argv, done = build(seed, base_dataset, where)
        monkeypatch.chdir(where)
        try:
            code, out, err = run_in_process(argv)
        except CaseTimeout:
            pytest.fail(f"seed {seed} ({done}): no answer within {CASE_TIMEOUT_S} s")
        except Exception as exc:  # noqa: BLE001 (an escaped exception is the traceback a user would see)
            pytest.fail(f"seed {seed} ({done}): {type(exc).__name__}: {exc}")
        problem = check_outcome(code, out, err)
        assert problem is None, f"seed {seed} ({done}): {problem}"
        outcomes[code] += 1
    print(f"chunk {chunk}: {outcomes[0]} accepted, {outcomes[2]} refused")
    assert outcomes[2] > 0  # the mutations do reach the checks


@pytest.mark.parametrize("seed", SUBPROCESS_SEEDS)
def test_random_mutations_through_a_real_process(seed, base_dataset, tmp_path):
    argv, done = build(seed, base_dataset, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "YOLOQ_WEIGHTS_DIR"}
    try:
        proc = subprocess.run([sys.executable, "-m", "yoloq.cli", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"seed {seed} ({done}): no answer within 60 s")
    problem = check_outcome(proc.returncode, proc.stdout, proc.stderr)
    assert problem is None, f"seed {seed} ({done}): {problem}"


# Commands that only read or are refused before touching anything (never `up`, `down`, `demo`, `node`).
FUZZ_COMMANDS = ["analyse", "submit", "status", "queue", "cancel", "retier", "quota", "history", "audit",
                 "alerts", "dataset"]
FUZZ_TOKENS = ["--json", "--gpu", "T4", "A100", "--since", "7d", "bogus", "--tu", "-1", "0", "2.5", "--clear",
               "--period", "week", "--team", "vision", "--reason", "", "--csv", "updated", "webhook", "block",
               "ftp://x", "http://127.0.0.1:9/x", "low", "urgent", "--home", "--", "-h?", "--version=1", "é",
               "{spec}", "{data}", "/nonexistent/x.yaml", "--port", "99999", "job-1", "--job", "--", "synth"]
CLI_CASES = 200


def _fuzz_argv(rng: random.Random, spec: Path, data: Path, home: Path) -> list[str]:
    tokens = [rng.choice(FUZZ_TOKENS) for _ in range(rng.randint(0, 5))]
    argv = [rng.choice(FUZZ_COMMANDS), *tokens]
    if "synth" in argv and argv[0] == "dataset":
        argv = ["dataset", "updated", *tokens]  # never write datasets here
    rng.shuffle(argv) if rng.random() < 0.15 else None
    filled = [a.format(spec=spec, data=data) if "{" in a else a for a in argv]
    return ["--home", str(home), *filled]


def test_random_command_lines_answer_0_or_one_error_line(base_dataset, tmp_path, monkeypatch):
    """Random command lines for the commands that only read: 0 or 2, one line, and no state folder."""
    spec = tmp_path / "job.yaml"
    shutil.copytree(base_dataset, tmp_path / "ds", symlinks=True)
    spec.write_text(yaml.safe_dump(BASE_SPEC))
    home = tmp_path / "no-state-here"
    monkeypatch.chdir(tmp_path)
    rng = random.Random(11)
    for case in range(CLI_CASES):
        argv = _fuzz_argv(rng, spec, tmp_path / "ds" / "data.yaml", home)
        if "-h?" in argv or any(a in ("-h", "--help") for a in argv):
            continue
        try:
            code, out, err = run_in_process(argv)
        except CaseTimeout:
            pytest.fail(f"case {case} {argv}: no answer within {CASE_TIMEOUT_S} s")
        except Exception as exc:  # noqa: BLE001 (reported with the case)
            pytest.fail(f"case {case} {argv}: {type(exc).__name__}: {exc}")
        problem = check_outcome(code, out, err)
        assert problem is None, f"case {case} {argv}: {problem}"
    assert not home.exists()

"""The warm launcher: segments fork from one pre-imported process per node.

A warm segment is the launcher's child in a session of its own, with the environment,
folder and arguments it was given and no CUDA initialised; `kill_group` leaves nothing
of it; its exit code reaches the agent; it trains bit-identical to cold processes; and
on the real stack the node agent starts segments this way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_exact_resume import EPOCHS, exact_weights, job, reference  # noqa: F401 (fixtures)

from work_pools import processes
from work_pools.launcher import MARKER_ENV
from work_pools.warm_start import COLD_COMMAND, LOST_EXIT, LauncherClient, SegmentStarter, cold_reason
from yoloq.base.errors import UserError

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROBE = "tests.launcher_probe"


@pytest.fixture(scope="module")
def launcher():
    client = LauncherClient(dict(os.environ), PROJECT_DIR)
    client.wait_ready()
    yield client
    client.close()


def wait_file(path: Path, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def probe(launcher: LauncherClient, out: Path, *args: str, **env: str) -> tuple[int, int | None, dict]:
    """Fork the probe; (pid, exit code or None when held, what it saw)."""
    pid = launcher.spawn({**os.environ, **env}, PROJECT_DIR, module=PROBE, argv=[str(out), *args])
    if "--hold" in args:
        return pid, None, wait_file(out)
    code = launcher.exit_future(pid).result(timeout=120)
    return pid, code, json.loads(out.read_text())


def test_segment_is_a_forked_child_in_its_own_session(launcher, tmp_path):
    pid, code, seen = probe(launcher, tmp_path / "seen.json", "x", PROBE_EXIT="3",
                            CUDA_VISIBLE_DEVICES="", PREFECT__FLOW_RUN_ID="run-1")
    assert code == 3
    assert seen["pid"] == pid and seen["ppid"] == launcher.pid
    assert seen["sid"] == seen["pgid"] == pid            # kill_group reaches all of it
    assert seen["env"][MARKER_ENV] == str(launcher.pid)
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "" and seen["env"]["PREFECT__FLOW_RUN_ID"] == "run-1"
    assert seen["cwd"] == str(PROJECT_DIR) and seen["argv"] == [str(tmp_path / "seen.json"), "x"]
    assert seen["main"] == "__main__" and seen["cuda_initialized"] is False


def test_warm_children_do_not_share_random_streams(launcher, tmp_path):
    """Python's, numpy's and torch's global generators are reseeded per child, as every
    cold process seeds them from the OS (forked children would otherwise all draw the
    launcher's numbers)."""
    _, _, first = probe(launcher, tmp_path / "a.json")
    _, _, second = probe(launcher, tmp_path / "b.json")
    for stream in ("random", "numpy", "torch"):
        assert first[stream] != second[stream], stream


def test_killed_warm_segment_leaves_no_process(launcher, tmp_path):
    pid, _, seen = probe(launcher, tmp_path / "held.json", "--hold")
    grandchild = seen["grandchild"]
    assert running(pid) and running(grandchild)
    assert processes.kill_group(pid, grace_s=3.0) is True
    code = launcher.exit_future(pid).result(timeout=30)
    assert code in (-signal.SIGTERM, -signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid) and not running(grandchild)
    assert launcher.alive()  # the launcher is not in the segment's group


def test_segments_outlive_a_stopped_launcher_and_are_still_waited_for(tmp_path):
    client = LauncherClient(dict(os.environ), PROJECT_DIR)
    client.wait_ready()
    pid, _, _ = probe(client, tmp_path / "held.json", "--hold")
    client.close()
    assert not client.alive() and running(pid)
    exit_code = client.exit_future(pid)
    assert not exit_code.done()
    processes.kill_group(pid, grace_s=3.0)
    assert exit_code.result(timeout=30) == LOST_EXIT  # the code died with the launcher
    with pytest.raises(Exception, match="launcher"):
        client.spawn(dict(os.environ), PROJECT_DIR, module=PROBE, argv=[str(tmp_path / "x")])


def test_segment_engine_entry_point_runs_in_the_child(launcher):
    """What the agent asks for: `python -m work_pools.segment_engine` (Prefect's engine entry
    point); without a run id it exits 1, as the cold command does."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT__FLOW_RUN_ID"}
    pid = launcher.spawn(env, PROJECT_DIR, stream_output=False)
    assert launcher.exit_future(pid).result(timeout=120) == 1
    cold = subprocess.run(COLD_COMMAND, cwd=PROJECT_DIR, env=env,
                          check=False, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 1 and "Invalid flow run id" in cold.stderr


@pytest.mark.parametrize("change, expected", [
    pytest.param({"PREFECT__FLOW_RUN_ID": "r", "PREFECT__WORKER_NAME": "w",
                  "CUDA_VISIBLE_DEVICES": "1", "YOLOQ_NODE_NAME": "n", "YOLOQ_REDUCED_BATCH": "4"},
                 None, id="per-segment-keys"),
    pytest.param({"PREFECT_LOGGING_LEVEL": "DEBUG"}, "PREFECT_LOGGING_LEVEL", id="prefect-setting"),
    pytest.param({"YOLO_CONFIG_DIR": "/elsewhere"}, "YOLO_CONFIG_DIR", id="import-time-key"),
    pytest.param({"PREFECT_API_URL": None}, "PREFECT_API_URL", id="missing-key"),
])
def test_cold_reason(change, expected):
    base = {"PREFECT_API_URL": "http://127.0.0.1:1/api", "YOLO_CONFIG_DIR": "/state"}
    env = {**base, **change}
    env = {k: v for k, v in env.items() if v is not None}
    reason = cold_reason(base, PROJECT_DIR, env, PROJECT_DIR)
    assert (reason is None) if expected is None else (expected in reason)


def test_cold_reason_other_folder(tmp_path):
    assert "folder" in cold_reason({}, PROJECT_DIR, {}, tmp_path)


def test_warm_start_switch_is_validated(monkeypatch):
    monkeypatch.setenv("YOLOQ_WARM_START", "yes")
    with pytest.raises(UserError, match="YOLOQ_WARM_START: must be 0 or 1"):
        SegmentStarter(logger=None)


def test_switch_off_starts_cold(monkeypatch):
    """YOLOQ_WARM_START=0: no launcher, the segment is `python -m work_pools.segment_engine`."""
    import asyncio
    import logging

    monkeypatch.setenv("YOLOQ_WARM_START", "0")
    starter = SegmentStarter(logging.getLogger("test"))
    assert starter.launcher_pid is None

    async def start() -> tuple[int, int]:
        env = {k: v for k, v in os.environ.items() if k != "PREFECT__FLOW_RUN_ID"}
        process = await starter.start_segment(env, PROJECT_DIR, stream_output=False)
        return process.pid, await process.wait()

    pid, code = asyncio.run(start())
    assert code == 1 and not running(pid)


# -- exactness through the warm path ---------------------------------------------------

def run_warm(launcher: LauncherClient, spec: Path, workdir: Path, stop_after: int,
             resume_from: Path | None = None) -> dict:
    """One segment forked by the launcher (test_exact_resume.run_cli, warm)."""
    result = workdir.with_suffix(".json")
    argv = ["--spec", str(spec), "--workdir", str(workdir), "--stop-after", str(stop_after),
            "--result", str(result)]
    if resume_from is not None:
        argv += ["--resume-from", str(resume_from)]
    pid = launcher.spawn(dict(os.environ), PROJECT_DIR, stream_output=False,
                         module="tests.segment_cli", argv=argv)
    assert launcher.exit_future(pid).result(timeout=600) == 0
    return json.loads(result.read_text())


@pytest.mark.training
def test_warm_segments_match_cold_one_go_bit_for_bit(launcher, job, reference, tmp_path):  # noqa: F811
    """test_exact_resume's 2+1+1 split, each segment forked warm with its checkpoint moved,
    against the same job trained in one go in a cold process."""
    import shutil

    ref_checkpoint, ref_epochs = reference
    done, checkpoint, epochs = 0, None, []
    for index, size in enumerate([2, 1, 1]):
        done += size
        out = run_warm(launcher, job, tmp_path / f"segment{index}", done, checkpoint)
        epochs += out["epochs"]
        produced = Path(out["result"]["checkpoint"])
        checkpoint = tmp_path / f"store{index}" / f"job-epoch{done}.ckpt"
        checkpoint.parent.mkdir()
        shutil.move(produced, checkpoint)
    expected, actual = exact_weights(ref_checkpoint), exact_weights(checkpoint)
    for part in ("model", "ema"):
        differing = [k for k, v in expected[part].items() if not torch.equal(v, actual[part][k])]
        assert not differing, f"{part}: {len(differing)} tensors differ, e.g. {differing[:3]}"
    assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1))
    assert epochs == ref_epochs


# -- the node agent on the real stack --------------------------------------------------

@pytest.mark.service
@pytest.mark.training
def test_node_agent_starts_segments_warm(yoloq_stack, tiny_dataset, tmp_path):
    """The segment of a submitted job is a child of the node's launcher, and the job completes."""
    from stack_helpers import wait_final, write_spec, yoloq
    from test_preemption_stack import wait_running

    spec = write_spec(tmp_path / "warm.yaml", tiny_dataset, name="warm-start", epochs=2,
                      segment_epochs=2)
    out = yoloq("submit", str(spec), "--json")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job_id"]
    segment = wait_running(job_id)
    pid = processes.recorded_pid(segment)
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    cmdline = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
    assert b"work_pools.launcher" in cmdline, cmdline
    assert os.getsid(pid) == pid
    assert wait_final(job_id)["state"] == "Completed"

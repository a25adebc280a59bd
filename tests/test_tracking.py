"""One MLflow run per job, across segments in separate processes (real SQLite store)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from yoloq.records.tracking import (
    TAG_JOB_ID,
    TAG_PREEMPTIONS,
    TAG_SEGMENTS,
    JobTracker,
    flatten_params,
    mlflow_metric_name,
)

EPOCH_METRICS = {"train/box_loss": 1.5, "metrics/mAP50-95(B)": 0.1, "lr/pg0": 0.01}


@pytest.fixture
def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"


def run_segment(tracking_uri: str, body: str) -> dict:
    """Run `body` in a fresh Python process with `tracker` and `job` defined; it sets `out`."""
    script = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from yoloq.records.tracking import JobTracker
        tracker = JobTracker(sys.argv[1], "yoloq-test")
        out = {}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script, tracking_uri], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("raw, expected", [
    pytest.param("metrics/mAP50-95(B)", "metrics/mAP50-95B", id="box-suffix"),
    pytest.param("metrics/precision(B)", "metrics/precisionB", id="precision"),
    pytest.param("train/box_loss", "train/box_loss", id="already-valid"),
    pytest.param("lr/pg0", "lr/pg0", id="lr"),
    pytest.param("val/dfl loss%", "val/dfl loss_", id="other-char"),
])
def test_metric_names_follow_ultralytics_mlflow_callback(raw: str, expected: str) -> None:
    from ultralytics.utils.callbacks.mlflow import sanitize_dict

    assert mlflow_metric_name(raw) == expected
    if "%" not in raw:  # same name ultralytics' own callback logs
        assert list(sanitize_dict({raw: 1.0})) == [expected]


@pytest.mark.parametrize("values, expected", [
    pytest.param({"a": 1}, {"a": "1"}, id="scalar"),
    pytest.param({"train": {"lr0": 0.01, "mosaic": None}}, {"train.lr0": "0.01", "train.mosaic": "None"},
                 id="nested"),
    pytest.param({"spec": {"export": ["torchscript", "onnx"]}},
                 {"spec.export": "['torchscript', 'onnx']"}, id="list"),
    pytest.param({"empty": {}}, {"empty": "{}"}, id="empty-mapping"),
    pytest.param({"bad(key)": 1}, {"bad_key_": "1"}, id="key-sanitised"),
])
def test_flatten_params(values: dict, expected: dict) -> None:
    assert flatten_params(values) == expected


def test_long_param_values_are_truncated_to_mlflow_limit() -> None:
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    assert len(flatten_params({"x": "v" * 10_000})["x"]) == MAX_PARAM_VAL_LENGTH


def test_one_run_across_two_segment_processes(tracking_uri: str, tmp_path: Path) -> None:
    artifact = tmp_path / "results.csv"
    artifact.write_text("epoch,loss\n1,0.5\n")
    first = run_segment(tracking_uri, f"""
        run_id = tracker.run_for_job("job-a", params={{"train": {{"epochs": 4, "lr0": 0.01}}}},
                                     tags={{"yoloq.team": "vision", "yoloq.tier": "normal"}})
        tracker.increment_tag(run_id, "yoloq.segments")
        for epoch in (0, 1):
            tracker.log_epoch(run_id, epoch, {EPOCH_METRICS!r})
        out["run_id"] = run_id
    """)
    second = run_segment(tracking_uri, f"""
        run_id = tracker.run_for_job("job-a", params={{"train": {{"epochs": 4, "lr0": 0.5}},
                                                       "analysis": {{"images": 8}}}},
                                     tags={{"yoloq.team": "vision", "yoloq.tier": "urgent"}})
        tracker.increment_tag(run_id, "yoloq.preemptions")
        tracker.increment_tag(run_id, "yoloq.segments")
        # the retried epoch 1 (different values) must not add a point
        tracker.log_epoch(run_id, 1, {{k: v * 2 for k, v in {EPOCH_METRICS!r}.items()}})
        for epoch in (2, 3):
            tracker.log_epoch(run_id, epoch, {EPOCH_METRICS!r})
        tracker.log_artifacts(run_id, [Path({str(artifact)!r})], "train")
        out["run_id"] = run_id
    """)
    assert first["run_id"] == second["run_id"]

    tracker = JobTracker(tracking_uri, "yoloq-test")
    run_id = first["run_id"]
    for raw_name, value in EPOCH_METRICS.items():
        history = tracker.client.get_metric_history(run_id, mlflow_metric_name(raw_name))
        assert sorted(point.step for point in history) == [0, 1, 2, 3]
        assert {point.value for point in history if point.step == 1} == {value}  # first value kept

    run = tracker.client.get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.data.tags[TAG_JOB_ID] == "job-a"
    assert run.data.tags[TAG_SEGMENTS] == "2"
    assert run.data.tags[TAG_PREEMPTIONS] == "1"
    assert run.data.tags["yoloq.tier"] == "urgent"
    assert run.data.params == {"train.epochs": "4", "train.lr0": "0.01", "analysis.images": "8"}
    logged = [f.path for f in tracker.client.list_artifacts(run_id, "train")]
    assert logged == ["train/results.csv"]

    tracker.finish(run_id)
    assert tracker.client.get_run(run_id).info.status == "FINISHED"
    runs = tracker.client.search_runs([tracker._experiment()])
    assert [r.info.run_id for r in runs] == [run_id]


def test_retrying_an_epoch_in_process_adds_no_step(tracking_uri: str) -> None:
    tracker = JobTracker(tracking_uri, "yoloq-test")
    run_id = tracker.run_for_job("job-retry")
    for epoch in (0, 0, 1, 1, 1):
        tracker.log_epoch(run_id, epoch, {"metrics/mAP50(B)": 0.5})
    history = tracker.client.get_metric_history(run_id, "metrics/mAP50B")
    assert [point.step for point in history] == [0, 1]


def test_runs_for_different_jobs_are_separate(tracking_uri: str) -> None:
    tracker = JobTracker(tracking_uri, "yoloq-test")
    assert tracker.run_for_job("job-1") != tracker.run_for_job("job-2")
    assert tracker.run_for_job("job-1") == tracker.run_for_job("job-1")


def test_run_for_job_reopens_a_finished_run(tracking_uri: str) -> None:
    tracker = JobTracker(tracking_uri, "yoloq-test")
    run_id = tracker.run_for_job("job-again")
    tracker.finish(run_id, "FAILED")
    assert tracker.run_for_job("job-again") == run_id
    assert tracker.client.get_run(run_id).info.status == "RUNNING"


def test_finish_refuses_a_non_terminal_status(tracking_uri: str) -> None:
    tracker = JobTracker(tracking_uri, "yoloq-test")
    with pytest.raises(ValueError, match="terminal status"):
        tracker.finish(tracker.run_for_job("job-x"), "RUNNING")


def test_two_processes_starting_the_same_job_at_once_agree(tracking_uri: str, tmp_path: Path) -> None:
    JobTracker(tracking_uri, "yoloq-test").run_for_job("warm-up")  # schema and experiment exist
    go = tmp_path / "go"
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from yoloq.records.tracking import JobTracker
        tracker = JobTracker(sys.argv[1], "yoloq-test")
        tracker.client.search_runs([tracker._experiment()])
        while not Path(sys.argv[2]).exists():
            time.sleep(0.01)
        print(tracker.run_for_job("job-race"))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, tracking_uri, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    go.touch()
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err[-2000:] for _, err in outputs]
    run_ids = {out.strip().splitlines()[-1] for out, _ in outputs}
    assert len(run_ids) == 1
    tracker = JobTracker(tracking_uri, "yoloq-test")
    assert tracker.run_for_job("job-race") in run_ids


def test_default_location_is_the_state_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from blocks.mlflow import MlflowLocation

    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    location = MlflowLocation()
    assert location.resolved_tracking_uri() == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"
    tracker = location.tracker()
    run_id = tracker.run_for_job("job-default")
    note = tmp_path / "note.txt"
    note.write_text("hello")
    tracker.log_artifacts(run_id, [note])

    assert (tmp_path / "state" / "mlflow.db").is_file()
    stored = list((tmp_path / "state" / "mlartifacts").rglob("note.txt"))
    assert len(stored) == 1
    assert not (tmp_path / "mlruns").exists()
    assert not (tmp_path / "mlflow.db").exists()


def test_block_with_explicit_uri_and_experiment(tracking_uri: str) -> None:
    from blocks.mlflow import MlflowLocation

    location = MlflowLocation(tracking_uri=tracking_uri, experiment="other")
    tracker = location.tracker()
    run_id = tracker.run_for_job("job-b")
    experiment = tracker.client.get_experiment_by_name("other")
    assert tracker.client.get_run(run_id).info.experiment_id == experiment.experiment_id
    assert location.artifact_location().endswith("/store/mlartifacts")


def test_a_process_hung_on_the_store_lock_does_not_stall_later_jobs(tmp_path):
    """The first-use lock serialises only the store's creation: once the store exists, a
    process frozen while holding the lock (SIGSTOP, a hung data loader) blocks nobody."""
    import fcntl
    import threading

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    JobTracker(uri)  # first use: creates (migrates) the store under the lock
    with open(tmp_path / "mlflow.db.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the frozen process would hold it
        opened = threading.Event()
        threading.Thread(target=lambda: (JobTracker(uri), opened.set()), daemon=True).start()
        assert opened.wait(60), "a second tracker waited on the lock a hung process holds"


def test_bookkeeping_retries_a_transient_500_and_logs_it(tracking_uri: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """An artifact proxy answering 500 (a busy store behind the tracking server) is retried with
    backoff and a warning line; a permanent error is raised at once."""
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

    import yoloq.records.tracking as tracking

    monkeypatch.setattr("yoloq.base.retry.time.sleep", lambda s: None)
    tracker = JobTracker(tracking_uri, "yoloq-test")
    run_id = tracker.run_for_job("job-flaky")
    upload, calls = tracker.client.log_artifact, []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= 2:
            response = requests.Response()
            response.status_code = 500
            raise requests.HTTPError("500 Server Error: INTERNAL SERVER ERROR", response=response)
        return upload(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "log_artifact", flaky)
    (tmp_path / "results.csv").write_text("epoch\n1\n")
    with caplog.at_level("WARNING", logger="yoloq.tracking"):
        tracker.log_artifacts(run_id, [tmp_path / "results.csv"], artifact_path="training")
    assert len(calls) == 3
    assert caplog.text.count("retrying in") == 2 and "results.csv" in caplog.text
    assert [a.path for a in tracker.client.list_artifacts(run_id, "training")] == ["training/results.csv"]

    def missing(*args, **kwargs):
        raise MlflowException("no such run", error_code=RESOURCE_DOES_NOT_EXIST)

    monkeypatch.setattr(tracker.client, "set_terminated", missing)
    calls.clear()
    with pytest.raises(MlflowException, match="no such run"):
        tracker.finish(run_id)
    assert not tracking.is_transient(MlflowException("x", error_code=RESOURCE_DOES_NOT_EXIST))


def test_a_new_sqlite_store_lets_readers_in_while_a_writer_holds_its_lock(tracking_uri: str) -> None:
    """A segment stopped mid-transaction (frozen, or hung on a disk) must not lock the job
    page and `yoloq status` out: the store is in write-ahead-log mode from its first use."""
    import sqlite3
    import time

    tracker = JobTracker(tracking_uri, "yoloq-test")
    run_id = tracker.run_for_job("job-wal", params={"train": {"epochs": 1}})
    db_path = tracking_uri.removeprefix("sqlite:///")
    with sqlite3.connect(db_path) as probe:
        assert probe.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET name = name")  # a write in progress, its lock held
    try:
        began = time.monotonic()
        reader = JobTracker(tracking_uri, "yoloq-test")
        assert reader.client.get_run(run_id).data.tags[TAG_JOB_ID] == "job-wal"
        assert time.monotonic() - began < 10, "the read waited for the writer"
    finally:
        writer.execute("ROLLBACK")
        writer.close()

"""Bulk submission: `key=value` overrides, sweep files, many specs in one `yoloq submit`.

Pure table tests for override parsing and sweep expansion (no server); `--dry-run` and the
refusal of a batch with a bad spec in it through the CLI without a stack; then, on the session
stack, a 4-job sweep in one call and a batch with a refused job that creates nothing. The
GPU worker is paused while jobs exist, and every job is cancelled before it could train.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_helpers import paused_worker

from yoloq import cli

from yoloq.domain import sweep
from yoloq.base.errors import SpecError
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

BASE = {"name": "base", "team": "vision", "model": "yolov8n.yaml", "data": "ds/data.yaml", "epochs": 1,
        "imgsz": 64, "batch": 4, "export": [], "train_args": {"seed": 0, "workers": 0, "plots": False}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder with a tiny dataset (ds/), base.yaml and a few sweep files."""
    root = tmp_path_factory.mktemp("bulk")
    synth_dataset(root / "ds", train=4, val=2, imgsz=32, seed=0, relative_path=True)
    write(root / "base.yaml", BASE)
    write(root / "sweep.yaml", {"base": "base.yaml", "name": "{name}-{model}-lr{lr0}",
                                "grid": {"lr0": [0.01, 0.001], "model": ["yolov8n.yaml", "yolo11n.yaml"]}})
    return root


def write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- overrides -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("arg", "key", "value"), [
    pytest.param("epochs=5", "epochs", 5, id="int"),
    pytest.param("lr0=0.01", "lr0", 0.01, id="float"),
    pytest.param("lrf=1e-3", "lrf", 0.001, id="exponent-is-a-number"),
    pytest.param("amp=false", "amp", False, id="bool"),
    pytest.param("export=[onnx, torchscript]", "export", ["onnx", "torchscript"], id="flow-list"),
    pytest.param("name=run-a", "name", "run-a", id="string"),
    pytest.param("segment_epochs=null", "segment_epochs", None, id="null"),
    pytest.param("train_args.mosaic=0.5", "train_args.mosaic", 0.5, id="dotted"),
    pytest.param("name=a=b", "name", "a=b", id="equals-in-value"),
])
def test_override_values_read_as_yaml(arg, key, value):
    assert sweep.parse_override(arg) == (key, value)


@pytest.mark.parametrize(("key", "path"), [
    pytest.param("epochs", ("epochs",), id="spec-field"),
    pytest.param("lr0", ("train_args", "lr0"), id="train-arg-moves-under-train_args"),
    pytest.param("train_args.lr0", ("train_args", "lr0"), id="explicit-train_args"),
    pytest.param("mosaic", ("train_args", "mosaic"), id="another-train-arg"),
])
def test_override_key_goes_where_it_belongs(key, path):
    assert sweep.key_path(key) == path


@pytest.mark.parametrize(("key", "words"), [
    pytest.param("tier", "did you mean 'priority'", id="alias"),
    pytest.param("epoch", "did you mean 'epochs'", id="near-field"),
    pytest.param("lrr0", "did you mean 'lr0'", id="near-train-arg"),
    pytest.param("resume", "yoloq manages it", id="owned"),
    pytest.param("device", "CUDA_VISIBLE_DEVICES", id="refused"),
    pytest.param("foo.bar", "only train_args takes a dotted key", id="dotted-elsewhere"),
    pytest.param("zzzz", "unknown field", id="unknown"),
])
def test_bad_override_key_gets_the_spec_message(key, words):
    with pytest.raises(SpecError) as caught:
        sweep.key_path(key, 1)
    assert caught.value.field == key and words in caught.value.line()


def test_same_key_in_a_spec_file_and_an_override_gives_the_same_message():
    with pytest.raises(SpecError) as from_spec:
        parse_spec({**BASE, "tier": "high"})
    with pytest.raises(SpecError) as from_override:
        sweep.key_path("tier", "high")
    assert from_spec.value.line() == from_override.value.line()


def test_overrides_apply_over_the_spec():
    raw = sweep.apply_overrides(BASE, [("lr0", 0.02), ("epochs", 3), ("train_args.seed", 7)])
    spec = parse_spec(raw)
    assert spec.epochs == 3
    assert spec.train_args == {"seed": 7, "workers": 0, "plots": False, "lr0": 0.02}
    assert BASE["train_args"] == {"seed": 0, "workers": 0, "plots": False}  # the input is not changed


@pytest.mark.parametrize(("items", "problem"), [
    pytest.param(["epochs=2"], "no spec file given", id="no-spec"),
    pytest.param(["a.yaml", "lr0=0.1", "lr0=0.2"], "overridden twice", id="twice"),
])
def test_bad_command_lines(items, problem):
    with pytest.raises(SpecError, match=problem):
        sweep.split_items(items)


def test_items_split_into_specs_and_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "odd=name.yaml").write_text("{}")  # an existing file is a spec, '=' or not
    paths, overrides = sweep.split_items(["a.yaml", "epochs=2", "odd=name.yaml", "b.yaml", "lr0=0.1"])
    assert paths == ["a.yaml", "odd=name.yaml", "b.yaml"]
    assert overrides == [("epochs", 2), ("lr0", 0.1)]


# --- sweeps --------------------------------------------------------------------------------------

def test_sweep_expands_to_named_jobs_in_grid_order(folder):
    jobs = sweep.plan([str(folder / "sweep.yaml")], [("epochs", 2)])
    assert [j.error for j in jobs] == [None] * 4
    assert [j.spec.name for j in jobs] == ["base-yolov8n.yaml-lr0.01", "base-yolo11n.yaml-lr0.01",
                                           "base-yolov8n.yaml-lr0.001", "base-yolo11n.yaml-lr0.001"]
    assert [(j.spec.train_args["lr0"], j.spec.model) for j in jobs] == [
        (0.01, "yolov8n.yaml"), (0.01, "yolo11n.yaml"), (0.001, "yolov8n.yaml"), (0.001, "yolo11n.yaml")]
    assert {j.spec.epochs for j in jobs} == {2}  # the command line's override applies to every job
    assert {j.spec.data for j in jobs} == {str(folder / "ds" / "data.yaml")}  # relative to the base
    assert jobs[1].point == {"lr0": 0.01, "model": "yolo11n.yaml"}


@pytest.mark.parametrize(("grid", "names"), [
    pytest.param({"lr0": [0.01, 0.001]}, ["base-lr0_0.01", "base-lr0_0.001"], id="one-key"),
    pytest.param({"model": ["yolov8n.yaml"], "amp": [True, False]},
                 ["base-model_yolov8n-amp_true", "base-model_yolov8n-amp_false"], id="suffix-and-bool"),
    pytest.param({"train_args.lr0": [0.5]}, ["base-lr0_0.5"], id="dotted-key"),
])
def test_default_names_are_readable(folder, grid, names):
    path = write(folder / "default-names.yaml", {"base": "base.yaml", "grid": grid})
    jobs = sweep.plan([str(path)], [])
    assert [j.spec.name for j in jobs] == names


def test_inline_base_and_template_with_index(folder):
    path = write(folder / "inline.yaml", {"base": {**BASE, "name": "inl"}, "grid": {"epochs": [1, 2, 3]},
                                          "name": "{name}-{index}-E{epochs}"})
    jobs = sweep.plan([str(path)], [])
    assert [j.spec.name for j in jobs] == ["inl-1-e1", "inl-2-e2", "inl-3-e3"]  # lowercased
    assert [j.spec.epochs for j in jobs] == [1, 2, 3]


@pytest.mark.parametrize(("sweep_file", "field", "words"), [
    pytest.param({"grid": {"lr0": [0.1]}}, "base", "required", id="no-base"),
    pytest.param({"base": "missing.yaml", "grid": {"lr0": [0.1]}}, "base", "file not found", id="base-missing"),
    pytest.param({"base": "base.yaml", "grid": {"lr0": 0.1}}, "grid.lr0", "non-empty list", id="scalar"),
    pytest.param({"base": "base.yaml", "grid": {"lr0": []}}, "grid.lr0", "non-empty list", id="empty-list"),
    pytest.param({"base": "base.yaml", "grid": {}}, "grid", "mapping", id="empty-grid"),
    pytest.param({"base": "base.yaml", "grid": {"lrr0": [0.1]}}, "grid.lrr0", "did you mean 'lr0'", id="grid-key"),
    pytest.param({"base": "base.yaml", "grid": {"name": ["a"]}}, "grid.name", "template", id="grid-name"),
    pytest.param({"base": "base.yaml", "grids": {}, "grid": {"lr0": [0.1]}}, "grids", "did you mean 'grid'",
                 id="sweep-key"),
    pytest.param({"base": "base.yaml", "grid": {"lr0": [0.1]}, "name": "{name}-{lr}"}, "name", "{lr}",
                 id="template-field"),
    pytest.param({"base": "base.yaml", "grid": {"lr0": [0.1, 0.2]}, "name": "{name}"}, "name",
                 "more than one job", id="same-names"),
    pytest.param({"base": "base.yaml", "grid": {"lr0": list(range(11)), "lrf": list(range(10)),
                                                "momentum": list(range(10))}}, "grid", "1100 jobs",
                 id="too-many"),
    pytest.param({"base": "base.yaml", "grid": {"epochs": [1]}}, "epochs", "both set by the sweep", id="clash"),
])
def test_bad_sweep_is_one_error_for_the_file(folder, sweep_file, field, words):
    path = write(folder / "bad-sweep.yaml", sweep_file)
    [job] = sweep.plan([str(path)], [("epochs", 2)])
    assert job.spec is None and job.source == str(path)
    assert job.error.field == field and words in job.error.line(), job.error.line()


def test_a_sweep_names_its_jobs_itself(folder):
    [job] = sweep.plan([str(folder / "sweep.yaml")], [("name", "x")])
    assert job.error.field == "name" and "command-line override" in job.error.problem


def test_a_bad_grid_point_fails_alone(folder):
    path = write(folder / "points.yaml", {"base": "base.yaml", "grid": {"imgsz": [64, 100]}})
    good, bad = sweep.plan([str(path)], [])
    assert good.error is None and good.spec.imgsz == 64
    assert bad.spec is None and bad.error.field == "imgsz" and "base-imgsz_100" in bad.source


# --- the command, without a stack -----------------------------------------------------------------

def test_dry_run_prints_the_expanded_jobs(folder, capsys):
    code = cli.main(["--home", str(folder / "no-state"), "submit", str(folder / "sweep.yaml"), "--dry-run",
                     str(folder / "base.yaml"), "--json", "epochs=2"])  # options and items in any order
    out, err = capsys.readouterr()
    assert code == 0, err
    jobs = [json.loads(line) for line in out.splitlines()]
    assert [j["name"] for j in jobs] == ["base-yolov8n.yaml-lr0.01", "base-yolo11n.yaml-lr0.01",
                                         "base-yolov8n.yaml-lr0.001", "base-yolo11n.yaml-lr0.001", "base"]
    assert all(j["dry_run"] and j["spec"]["epochs"] == 2 and "job_id" not in j for j in jobs)
    assert jobs[0]["grid"] == {"lr0": 0.01, "model": "yolov8n.yaml"}
    assert jobs[1]["analysis"]["family"] == "yolo11"
    assert not (folder / "no-state").exists()


def test_a_bad_spec_stops_the_batch_before_the_stack_is_asked(folder, capsys):
    """Analysis comes first: the bad spec is named (file and field) though no stack runs here."""
    bad = write(folder / "bad.yaml", {**BASE, "imgsz": 100})
    worse = write(folder / "worse.yaml", {**BASE, "epochs": 0})
    code = cli.main(["--home", str(folder / "no-state"), "submit", str(folder / "base.yaml"), str(bad),
                     str(worse), str(folder / "sweep.yaml")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {bad}: imgsz: must be a multiple of 32")
    assert f"1 more bad: {worse} (epochs)" in line and "nothing created" in line
    assert not (folder / "no-state").exists()


def test_keep_going_dry_run_lists_the_good_and_names_the_bad(folder, capsys):
    bad = write(folder / "bad.yaml", {**BASE, "imgsz": 100})
    code = cli.main(["submit", str(folder / "base.yaml"), str(bad), "--dry-run", "--keep-going"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out.splitlines()[0].startswith("would submit base ")
    assert err.strip().startswith(f"error: {bad}: imgsz:")


# --- on the session stack -------------------------------------------------------------------------

def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 600) -> Any:
    deadline, value = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what} (last: {value!r})")


def runs_named(prefix: str) -> list:
    """The yolo-job runs whose name starts with `prefix`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterName,
    )

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=prefix)),
                                     deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["yolo-job"])))
    return [run for run in runs if run.name.startswith(prefix)]


def job_states(job_id: str) -> tuple[str, list[str]]:
    """(the parent's state name, its segments' state names)."""
    from prefect.client.orchestration import get_client

    from yoloq.records.jobs import find_job

    with get_client(sync_client=True) as client:
        job = find_job(client, job_id)
    return job.flow_run.state.name, [s.state.name for s in job.segments]


def waiting(job_id: str) -> bool:
    parent, segments = job_states(job_id)
    return parent == "Running" and segments == ["Scheduled"]


@pytest.mark.service
@pytest.mark.timeout(1500)  # the session stack's start counts here; a loaded host needs minutes
def test_sweep_submits_four_named_jobs_in_one_call(yoloq_stack, folder, capsys, monkeypatch):
    monkeypatch.setenv("YOLOQ_HOME", str(yoloq_stack.paths.root))
    path = write(folder / "svc-sweep.yaml", {"base": {**BASE, "name": "bulk4", "data": "ds/data.yaml"},
                                             "grid": {"lr0": [0.01, 0.001], "model": ["yolov8n.yaml", "yolo11n.yaml"]},
                                             "name": "{name}-{model}-lr{lr0}"})
    with paused_worker(yoloq_stack):
        code = cli.main(["submit", str(path), "--json", "priority=low"])
        out, err = capsys.readouterr()
        assert code == 0, err
        printed = [json.loads(line) for line in out.splitlines()]
        job_ids = [p["job_id"] for p in printed]
        try:
            runs = {run.name: run for run in runs_named("bulk4-")}
            assert sorted(runs) == sorted(job_ids)
            expected = {"bulk4-yolov8n.yaml-lr0.01": (0.01, "yolov8n.yaml"),
                        "bulk4-yolo11n.yaml-lr0.01": (0.01, "yolo11n.yaml"),
                        "bulk4-yolov8n.yaml-lr0.001": (0.001, "yolov8n.yaml"),
                        "bulk4-yolo11n.yaml-lr0.001": (0.001, "yolo11n.yaml")}
            seen = {}
            for job_id in job_ids:
                spec = runs[job_id].parameters["spec"]
                assert job_id.startswith(spec["name"] + "-") and runs[job_id].parameters["job_id"] == job_id
                assert spec["priority"] == "low" and "tier:low" in runs[job_id].tags
                seen[spec["name"]] = (spec["train_args"]["lr0"], spec["model"])
            assert seen == expected
            # each parent runs and waits on its first segment (held Scheduled): then cancel
            wait_for(lambda: all(waiting(job_id) for job_id in job_ids), "the four jobs waiting", 600)
        finally:
            for job_id in job_ids:
                assert cli.main(["cancel", job_id]) == 0
    for job_id in job_ids:  # cancelled for real: no run of these jobs occupies the slot
        _parent, segments = wait_for(lambda j=job_id: (s := job_states(j))[0] == "Cancelled" and s,
                                     f"{job_id} cancelled", 240)
        assert segments and all(state == "Cancelled" for state in segments), (job_id, segments)


@pytest.mark.service
def test_a_refused_job_among_several_creates_nothing(yoloq_stack, folder, capsys, monkeypatch):
    """The pool's check refuses one job (it fits no GPU of the pool, even at the smallest
    batch): the batch stops after checking every job, before any run is created."""
    monkeypatch.setenv("YOLOQ_HOME", str(yoloq_stack.paths.root))
    good = write(folder / "nothing-good.yaml", {**BASE, "name": "nothing-good"})
    huge = write(folder / "nothing-huge.yaml", {**BASE, "name": "nothing-huge", "model": "yolo11x.yaml",
                                                "imgsz": 4096, "batch": 64})
    from work_pools.nodes import live_pool_gpus

    wait_for(live_pool_gpus, "the GPU worker's node", 300)
    code = cli.main(["submit", str(good), str(huge), "epochs=2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {huge}: batch: ") and "nothing created" in line
    assert runs_named("nothing-") == []

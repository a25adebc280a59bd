"""`yoloq analyse` and `yoloq submit` give the same verdict on every input: the same exit code and
the same error line, for every case of the bad-input corpus, for a job that fits no GPU of the
live pool, and for a good job. Real CLI, one real stack for all of it.

A case without `--gpu` goes, for both commands, to this host's stack API (the local operator):
so `POST /v1/analyse` and `POST /v1/jobs` are held to the same verdict too. A case with `--gpu`
is decided in the CLI's own process, against the same stack.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from corpus.build import argv_for, build_case, load_manifest, write_fake_checkpoints
from stack_helpers import wait_for

from yoloq import cli
from yoloq.datasets.synth import synth_dataset

pytestmark = pytest.mark.service

MANIFEST = load_manifest()
# Errors of the command line itself (argparse, `--home`): the command's own name and arguments
# are in the line, so `analyse` and `submit` word them differently. They are not verdicts.
COMMAND_LINE_CASES = {"cli-missing-spec", "cli-unknown-option", "cli-gpu-without-value",
                      "cli-home-without-value"}


def verdict_cases() -> list[dict]:
    """Every corpus case that runs `yoloq analyse SPEC ...`, less the command-line ones."""
    return [c for c in MANIFEST["cases"] if c["id"] not in COMMAND_LINE_CASES
            and ("argv" not in c or c["argv"][:1] == ["analyse"])]


def test_the_agreement_covers_the_whole_corpus_of_specs():
    """A new corpus case for `analyse` is held to the agreement without anyone listing it."""
    analyse_cases = [c for c in MANIFEST["cases"] if "argv" not in c or c["argv"][:1] == ["analyse"]]
    assert len(verdict_cases()) == len(analyse_cases) - len(COMMAND_LINE_CASES) >= 100


@pytest.fixture(scope="module")
def stack_home(yoloq_stack, tmp_path_factory):
    """This host's stack with its node live (the fit is checked against it)."""
    from work_pools.nodes import live_pool_gpus

    wait_for(live_pool_gpus, "the GPU worker's node", 300)
    return yoloq_stack


@pytest.fixture(scope="module")
def corpus_inputs(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("agreement") / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, nc=3, seed=0, relative_path=True)
    folder = tmp_path_factory.mktemp("agreement-checkpoints")
    made = write_fake_checkpoints(folder)
    made["segment"] = _segment_checkpoint(folder / "segment.pt")
    return root, made


def _segment_checkpoint(path: Path) -> Path:
    import torch
    from ultralytics import __version__
    from ultralytics.nn.tasks import SegmentationModel

    model = SegmentationModel("yolov8n-seg.yaml", nc=3, verbose=False).half()
    torch.save({"epoch": -1, "model": model, "ema": None, "optimizer": None, "version": __version__,
                "date": "2026-11-30T00:00:00", "train_args": {"model": "yolov8n-seg.yaml", "task": "segment"}},
               path)
    return path


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in verdict_cases()])
def test_analyse_and_submit_refuse_alike(case, stack_home, corpus_inputs, tmp_path, capsys):
    dataset, checkpoints = corpus_inputs
    spec, extra = build_case(case, MANIFEST["base_spec"], dataset, tmp_path, checkpoints)
    analyse = argv_for(case, spec, extra)
    submit = ["submit", *analyse[1:]]
    a_code, a_out, a_err = _cli(analyse, capsys)
    s_code, s_out, s_err = _cli(submit, capsys)
    assert (a_code, s_code) == (2, 2), (a_out + a_err, s_out + s_err)
    assert _error_line(a_err) == _error_line(s_err)
    assert case["expect"] in _error_line(a_err)
    assert "Traceback" not in a_err + s_err and "submitted" not in s_out


def _write(where: Path, dataset: Path, **fields) -> Path:
    spec = {**MANIFEST["base_spec"], "data": str(dataset / "data.yaml"), **fields}
    path = where / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("gpu", [pytest.param([], id="stack-api"), pytest.param(["--gpu", "T4"], id="in-process")])
def test_a_job_that_fits_no_gpu_of_the_pool_is_refused_by_both(gpu, stack_home, corpus_inputs, tmp_path, capsys):
    """The issue's case: `analyse` used to warn and exit 0 where `submit` refused. The live pool is
    the stack's one declared 8 GB slot: yolo11x at 1280 px, batch 64 fits nowhere."""
    dataset, _ = corpus_inputs
    spec = _write(tmp_path, dataset, name="too-big", model="yolo11x.yaml", imgsz=1280, batch=64)
    a_code, a_out, a_err = _cli(["analyse", str(spec), *gpu], capsys)
    s_code, s_out, s_err = _cli(["submit", str(spec), *gpu], capsys)
    assert (a_code, s_code) == (2, 2), (a_out + a_err, s_out + s_err)
    line = _error_line(a_err)
    assert line == _error_line(s_err)
    assert line.startswith("error: batch: 64 needs about") and "it fits no GPU in the pool" in line


def test_a_good_job_is_accepted_by_both_with_the_fit_analyse_shows(stack_home, corpus_inputs, tmp_path, capsys):
    from yoloq.service.jobs import cancel, find
    from yoloq.service.connection import stack_client

    dataset, _ = corpus_inputs
    spec = _write(tmp_path, dataset, name="agrees", priority="low")
    a_code, a_out, a_err = _cli(["analyse", str(spec), "--json"], capsys)
    assert a_code == 0, a_err
    admission = json.loads(a_out)["admission"]
    assert admission["accepted"] is True and admission["fit"]["source"] == "live nodes", admission
    s_code, s_out, s_err = _cli(["submit", str(spec), "--json"], capsys)
    assert s_code == 0, s_err
    submitted = json.loads(s_out)
    assert submitted["fit"] == admission["fit"]
    with stack_client() as client:  # nothing to train here: the verdict was the point
        cancel(client, find(client, submitted["job_id"]), "test done")

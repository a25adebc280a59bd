"""Submit against the live pool: a job that fits no node's GPU is refused, with the largest one's numbers."""

from __future__ import annotations

import pytest
import yaml
from stack_helpers import published_node

from yoloq import cli
from yoloq.base.names import GPU_POOL
from yoloq.datasets.synth import synth_dataset

pytestmark = pytest.mark.service


def test_job_that_fits_no_live_gpu_is_refused(yoloq_stack, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("YOLOQ_HOME", str(yoloq_stack.paths.root))
    synth_dataset(tmp_path / "ds", train=4, val=2, imgsz=32, seed=0, relative_path=True)
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump({"name": "too-big", "team": "vision", "model": "yolo11x.yaml",
                                    "data": "ds/data.yaml", "epochs": 3, "imgsz": 1280, "batch": 64}))
    with published_node("fit-test-node", "NVIDIA A100-SXM4-80GB", 80.0, GPU_POOL):
        code = cli.main(["submit", str(spec)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1
    assert "error: batch: 64 needs about 156.5 GB" in err
    # the largest live GPU is named with its node (the stack's own declared 8 GB slot is smaller)
    assert "the largest, NVIDIA A100-SXM4-80GB on node fit-test-node, has 80 GB (72 GB usable), " \
           "where at most 29 fits" in err

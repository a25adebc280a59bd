"""Fits somewhere, or refused: the pure pool-fit check, and exact GPU names."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from yoloq.domain import gpus
from yoloq.analysis import estimates
from yoloq.analysis.fit import PoolGpu, check_fit
from yoloq.analysis.models import model_size


@dataclass(frozen=True)
class Job:
    params_m: float
    gflops: float
    imgsz: int
    batch: int
    amp: bool = True


def job(family_scale: tuple[str, str], imgsz: int, batch: int, amp: bool = True) -> Job:
    return Job(*model_size(*family_scale), imgsz=imgsz, batch=batch, amp=amp)


V100 = PoolGpu("node-a", "Tesla V100-SXM2-32GB", 32.0)
A100 = PoolGpu("node-b", "NVIDIA A100-SXM4-80GB", 80.0)
H200 = PoolGpu("node-c", "NVIDIA H200", 141.0)
CPU = PoolGpu("laptop", "declared CPU slot", 8.0)


@pytest.mark.parametrize("the_job, pool, min_batch, ok, where, batch, reduced", [
    pytest.param(job(("yolov8", "n"), 640, 16), [V100], 16, True, V100, 16, False, id="small-fits"),
    pytest.param(job(("yolov8", "x"), 640, 64), [V100, A100], 64, True, A100, 64, False,
                 id="fits-the-larger-node-only"),
    pytest.param(job(("yolov8", "x"), 640, 64), [V100], 64, False, V100, 0, False,
                 id="too-big-no-reduction"),
    pytest.param(job(("yolov8", "x"), 640, 64), [V100], 8, True, V100, 34, True, id="fits-reduced"),
    pytest.param(job(("yolo11", "x"), 1280, 64), [V100, A100, H200], 64, False, H200, 0, False,
                 id="issue-156gb-fits-nowhere"),
    pytest.param(job(("yolo11", "x"), 1280, 64), [V100, A100, H200], 1, True, H200, 51, True,
                 id="issue-156gb-reduced-allowed"),
    pytest.param(job(("yolov8", "n"), 64, 8), [CPU], 8, True, CPU, 8, False, id="declared-slot"),
    pytest.param(job(("yolov8", "x"), 640, 8), [], 8, False, None, 0, False, id="empty-pool"),
])
def test_check_fit(the_job, pool, min_batch, ok, where, batch, reduced):
    verdict = check_fit(the_job, pool, min_batch)
    assert (verdict.ok, verdict.gpu, verdict.batch, verdict.reduced) == (ok, where, batch, reduced)
    assert (verdict.refusal is None) is ok
    if not ok:
        assert "\n" not in verdict.line and "(fix: " in verdict.line


def test_refusal_names_the_largest_gpu_with_its_numbers():
    the_job = job(("yolo11", "x"), 1280, 64)
    verdict = check_fit(the_job, [V100, H200, A100], 60)
    need = estimates.peak_memory_gb(the_job.params_m, the_job.gflops, 1280, 64)
    assert 150 < need < 160  # the 156 GB
    line = verdict.line
    assert line.startswith(f"batch: 64 needs about {need:.1f} GB (")
    assert "at 60, the smallest batch the policy allows" in line
    assert "the largest, NVIDIA H200 on node node-c, has 141 GB (127 GB usable), where at most 51 fits" in line


def test_max_batch_never_exceeds_the_spec_limit():
    from yoloq.domain.spec import MAX_BATCH

    tiny = model_size("yolov8", "n")
    assert estimates.max_batch(*tiny, 32, gpus.CATALOG["H200-141GB"]) == MAX_BATCH
    assert estimates.batch_capacity(*tiny, 32, 10_000.0) == MAX_BATCH


@pytest.mark.parametrize("name, expected", [
    pytest.param("A100-80GB", "A100-80GB", id="catalog"),
    pytest.param("a100-80gb", "A100-80GB", id="catalog-any-case"),
    pytest.param("T4", "T4-16GB", id="short-alias"),
    pytest.param("L40S", "L40S-48GB", id="l40s-is-not-l4"),
    pytest.param("NVIDIA L40S", "L40S-48GB", id="nvml-l40s"),
    pytest.param("NVIDIA  A100-SXM4-80GB", "A100-80GB", id="nvml-a100-extra-blank"),
    pytest.param("Tesla V100-SXM2-16GB", "V100-16GB", id="nvml-v100"),
    pytest.param("NVIDIA H200", "H200-141GB", id="nvml-h200"),
])
def test_gpu_names_match_exactly_or_by_alias(name, expected):
    assert gpus.lookup(name).name == expected


@pytest.mark.parametrize("name, hint", [
    pytest.param("A100", "ambiguous: write A100-40GB or A100-80GB", id="a100-ambiguous"),
    pytest.param("V100", "ambiguous", id="v100-ambiguous"),
    pytest.param("A10-24", "use one of", id="no-prefix-match"),
    pytest.param("NVIDIA H100 PCIe", "use one of", id="other-h100-variant"),
    pytest.param("L40", "use one of", id="l40-is-not-l40s"),
])
def test_unknown_or_ambiguous_gpu_names_are_refused(name, hint):
    with pytest.raises(gpus.UnknownGpu) as caught:
        gpus.lookup(name)
    assert hint in caught.value.hint and isinstance(caught.value, KeyError)


def test_every_alias_points_at_a_catalog_entry():
    assert set(gpus.ALIASES.values()) <= set(gpus.CATALOG)
    for choices in gpus.AMBIGUOUS.values():
        assert set(choices) <= set(gpus.CATALOG)


def test_unknown_real_gpu_is_charged_the_default_and_warned_once(caplog):
    name = "NVIDIA B999 Test Edition"
    with caplog.at_level(logging.WARNING, logger="yoloq.domain.gpus"):
        speeds = [gpus.device_speed(name) for _ in range(3)]
    assert speeds == [gpus.DEFAULT_UNKNOWN_SPEED] * 3
    assert len([r for r in caplog.records if name in r.getMessage()]) == 1
    assert gpus.device_speed("NVIDIA L40S") == gpus.CATALOG["L40S-48GB"].speed

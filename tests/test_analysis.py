"""`analyse`: the malformed-input corpus through the real CLI, models, estimates, job class, exactness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from corpus.build import argv_for, build_case, load_manifest, write_fake_checkpoints

from yoloq import cli

from yoloq.domain import gpus
from yoloq.analysis import analyse, analyse_file, classify, estimates
from yoloq.datasets.validate import validate_dataset
from yoloq.analysis.models import resolve_model_name
from yoloq.base.errors import DatasetError, ModelError, SpecError
from yoloq.domain.spec import parse_spec
from yoloq.datasets.synth import synth_dataset

MANIFEST = load_manifest()


@pytest.fixture(scope="session")
def corpus_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "ds"
    synth_dataset(root, train=4, val=2, imgsz=32, nc=3, seed=0, relative_path=True)
    return root


@pytest.fixture(scope="session")
def corpus_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Fake checkpoints, plus a real ultralytics segmentation checkpoint (built, not trained)."""
    folder = tmp_path_factory.mktemp("checkpoints")
    made = write_fake_checkpoints(folder)
    made["segment"] = _segment_checkpoint(folder / "segment.pt")
    return made


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
    except SystemExit as exc:  # argparse: usage errors and --help
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in MANIFEST["cases"]])
def test_corpus_case_fails_with_one_clear_line(case, corpus_dataset, corpus_checkpoints, tmp_path, capsys):
    spec, extra = build_case(case, MANIFEST["base_spec"], corpus_dataset, tmp_path, corpus_checkpoints)
    code, out, err = _cli(argv_for(case, spec, extra), capsys)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert case["expect"] in lines[0]
    assert "Traceback" not in out + err


def test_corpus_has_enough_distinct_cases():
    ids = [c["id"] for c in MANIFEST["cases"]]
    assert len(ids) >= 25 and len(set(ids)) == len(ids)


def test_corpus_base_case_is_valid(corpus_dataset, tmp_path, capsys):
    spec, _ = build_case({"id": "base"}, MANIFEST["base_spec"], corpus_dataset, tmp_path, {})
    code, out, err = _cli(["analyse", str(spec), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    for key in ("family", "scale", "task", "nc", "names", "est_gpu_mem_gb", "max_batch", "gpu", "est_epoch_s",
                "est_duration_s", "job_class", "queue", "train_images", "val_images", "exact_resume",
                "warnings", "fingerprint"):
        assert key in result
    assert (result["family"], result["scale"], result["task"]) == ("yolov8", "n", "detect")
    assert result["names"] == ["rectangle", "ellipse", "triangle"] and result["nc"] == 3
    assert (result["train_images"], result["val_images"]) == (4, 2)
    assert result["gpu"] == gpus.REFERENCE.name and result["fingerprint"] is None
    assert result["job_class"] == "short" and result["queue"] == "normal"


def test_human_summary(corpus_dataset, tmp_path, capsys):
    spec, _ = build_case({"id": "base"}, MANIFEST["base_spec"], corpus_dataset, tmp_path, {})
    code, out, _ = _cli(["analyse", str(spec), "--gpu", "T4"], capsys)
    assert code == 0
    assert "short job, queue normal" in out and "on T4-16GB" in out and "yolov8 scale n" in out


def test_analyse_never_imports_torch_or_ultralytics(corpus_dataset, tmp_path):
    spec, _ = build_case({"id": "base"}, MANIFEST["base_spec"], corpus_dataset, tmp_path, {})
    script = (
        "import sys, time, json\n"
        "start = time.perf_counter()\n"
        "from yoloq.analysis import analyse_file\n"
        "result = analyse_file(sys.argv[1], gpu='A100-80GB')\n"
        "elapsed = time.perf_counter() - start\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'ultralytics': 'ultralytics' in sys.modules,\n"
        "                  'elapsed_s': elapsed, 'family': result.family}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(spec)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["torch"] is False and report["ultralytics"] is False
    assert report["family"] == "yolov8"
    print(f"analyse_file (import + analysis, 4+2 images): {report['elapsed_s'] * 1000:.0f} ms")


@pytest.mark.parametrize("name, family, version, scale", [
    pytest.param("yolov8n.yaml", "yolov8", "v8", "n", id="v8"),
    pytest.param("yolo11s.yaml", "yolo11", "11", "s", id="11"),
    pytest.param("yolov5nu.yaml", "yolov5u", "v5u", "n", id="v5u"),
    pytest.param("yolov9t.yaml", "yolov9", "v9", "t", id="v9"),
    pytest.param("yolov10n.yaml", "yolov10", "v10", "n", id="v10"),
    pytest.param("yolov10b.yaml", "yolov10", "v10", "b", id="v10b"),
    pytest.param("yolo12n.yaml", "yolo12", "12", "n", id="12"),
    pytest.param("yolo26x.yaml", "yolo26", "26", "x", id="26"),
])
def test_known_model_yamls(name, family, version, scale):
    info = resolve_model_name(name)
    assert (info.family, info.version, info.scale, info.task) == (family, version, scale, "detect")
    assert Path(info.yaml_path).is_file() and info.params_m > 0 and info.gflops > 0


def test_model_variant_is_accepted_with_a_warning(corpus_dataset, tmp_path):
    spec = _spec(corpus_dataset, tmp_path, model="yolov8s-p2.yaml")
    result = analyse(spec)
    assert (result.family, result.scale) == ("yolov8", "s")
    assert any("-p2 variant" in w for w in result.warnings)


@pytest.mark.parametrize("name, task", [("yolov8n-seg.yaml", "segment"), ("yolo11n-pose.yaml", "pose"),
                                        ("yolov8n-obb.yaml", "obb"), ("yolov8n.yaml", "detect")])
def test_every_trained_task_resolves_with_its_task(name, task):
    assert resolve_model_name(name).task == task


@pytest.mark.parametrize("name, expected", [
    pytest.param("yolov8s-world.yaml", "open-vocabulary", id="world"),
])
def test_unsupported_model_yamls(name, expected):
    with pytest.raises(ModelError, match=expected):
        resolve_model_name(name)


def _spec(dataset: Path, where: Path, **fields):
    raw = {**MANIFEST["base_spec"], "data": str(dataset / "data.yaml"), **fields}
    return parse_spec(raw, base_dir=where)


def test_batch_that_fits_an_a100_80gb_is_too_big_for_a_v100_32gb(corpus_dataset, tmp_path):
    spec = _spec(corpus_dataset, tmp_path, model="yolov8x.yaml", imgsz=640, batch=64)
    big, small = analyse(spec, gpu="A100-80GB"), analyse(spec, gpu="V100-32GB")
    assert big.fits and big.max_batch >= 64 and big.gpu == "A100-80GB"
    assert not small.fits and 0 < small.max_batch < 64
    assert any(f"at most {small.max_batch} fits" in w for w in small.warnings)
    assert big.est_gpu_mem_gb == small.est_gpu_mem_gb  # the need is the same; the card differs


@pytest.mark.parametrize("family_scale, imgsz, amp", [
    pytest.param(("yolov8", "n"), 640, True, id="v8n-640"),
    pytest.param(("yolo11", "x"), 1280, True, id="11x-1280"),
    pytest.param(("yolov9", "e"), 640, False, id="v9e-no-amp"),
])
def test_max_batch_is_the_largest_that_fits(family_scale, imgsz, amp):
    from yoloq.analysis.models import model_size

    params, gflops = model_size(*family_scale)
    for gpu in (gpus.CATALOG["T4-16GB"], gpus.CATALOG["A100-80GB"]):
        largest = estimates.max_batch(params, gflops, imgsz, gpu, amp)
        budget = gpu.mem_gb * estimates.USABLE_FRACTION
        assert estimates.peak_memory_gb(params, gflops, imgsz, largest + 1, amp) > budget
        if largest:
            assert estimates.peak_memory_gb(params, gflops, imgsz, largest, amp) <= budget


def test_memory_grows_with_batch_imgsz_scale_and_without_amp():
    from yoloq.analysis.models import model_size

    n, x = model_size("yolov8", "n"), model_size("yolov8", "x")
    base = estimates.peak_memory_gb(*n, 640, 16)
    assert estimates.peak_memory_gb(*n, 640, 32) > base
    assert estimates.peak_memory_gb(*n, 1280, 16) > base
    assert estimates.peak_memory_gb(*x, 640, 16) > base
    assert estimates.peak_memory_gb(*n, 640, 16, amp=False) > base


def test_duration_follows_images_epochs_imgsz_and_gpu():
    v100, h100 = gpus.REFERENCE, gpus.CATALOG["H100-80GB"]
    base = estimates.estimate_time("n", 640, 10, 1000, 100, v100)
    assert estimates.estimate_time("n", 640, 10, 2000, 100, v100).est_epoch_s > base.est_epoch_s
    assert estimates.estimate_time("n", 640, 20, 1000, 100, v100).est_duration_s > base.est_duration_s
    assert estimates.estimate_time("n", 1280, 10, 1000, 100, v100).est_epoch_s > base.est_epoch_s
    assert estimates.estimate_time("x", 640, 10, 1000, 100, v100).est_epoch_s > base.est_epoch_s
    assert estimates.estimate_time("n", 640, 10, 1000, 100, h100).est_epoch_s < base.est_epoch_s
    # 1000 images at 410 img/s, 100 val images at 0.35 of that, plus the per-epoch overhead
    expected = (1000 + 100 * estimates.VAL_COST) / (410 / (1 + estimates.IMAGE_OVERHEAD))
    assert base.est_epoch_s == pytest.approx(expected + estimates.EPOCH_OVERHEAD_S, abs=0.01)


@pytest.mark.parametrize("epochs, seconds, expected", [
    pytest.param(10, 600, "short", id="short"),
    pytest.param(30, classify.SHORT_MAX_S, "short", id="at-both-limits"),
    pytest.param(31, 600, "full", id="too-many-epochs"),
    pytest.param(10, classify.SHORT_MAX_S + 1, "full", id="too-long"),
])
def test_job_class_rule(epochs, seconds, expected):
    assert classify.job_class(seconds, epochs) == expected


@pytest.mark.parametrize("priority", ["urgent", "high", "normal", "low"])
def test_queue_is_the_tiers_queue(priority, corpus_dataset, tmp_path):
    result = analyse(_spec(corpus_dataset, tmp_path, priority=priority))
    assert result.queue == priority and result.tier == priority


def test_long_job_is_full(corpus_dataset, tmp_path):
    result = analyse(_spec(corpus_dataset, tmp_path, model="yolov8x.yaml", imgsz=1280, epochs=30))
    assert result.job_class == "short"  # 4 images: tiny even at 1280 px
    big = _big_list_dataset(tmp_path, corpus_dataset, copies=20000)
    result = analyse(_spec(big.parent, tmp_path, data=str(big), model="yolov8x.yaml", imgsz=1280, epochs=30))
    assert result.job_class == "full" and result.est_duration_reference_s > classify.SHORT_MAX_S
    assert any("checked the labels of" in w for w in result.warnings)


def _big_list_dataset(tmp_path: Path, dataset: Path, copies: int) -> Path:
    """A data YAML whose train list names the same 4 images many times (a cheap big dataset)."""
    images = sorted(str(p) for p in (dataset / "images" / "train").iterdir())
    listing = tmp_path / "big" / "train.txt"
    listing.parent.mkdir()
    listing.write_text("\n".join(images[i % len(images)] for i in range(copies)) + "\n")
    data = {"path": str(dataset), "train": str(listing), "val": "images/val",
            "names": ["rectangle", "ellipse", "triangle"]}
    data_yaml = listing.parent / "data.yaml"
    data_yaml.write_text(yaml.safe_dump(data))
    return data_yaml


@pytest.mark.parametrize("train_args, exact, accumulation_warning", [
    pytest.param({}, True, True, id="default-nbs-accumulates"),
    pytest.param({"nbs": 4}, True, False, id="nbs-equals-batch"),
    pytest.param({"deterministic": False, "nbs": 4}, False, False, id="not-deterministic"),
])
def test_exactness(train_args, exact, accumulation_warning, corpus_dataset, tmp_path):
    result = analyse(_spec(corpus_dataset, tmp_path, train_args=train_args))
    assert result.exact_resume is exact
    assert (result.exact_resume_reason is None) is exact
    assert any("gradient accumulation" in w for w in result.warnings) is accumulation_warning


@pytest.mark.parametrize("batches, epochs, accumulate, warmup, expected", [
    pytest.param(8, 10, 1, 24, [], id="no-accumulation"),
    pytest.param(8, 5, 4, 0, [], id="no-warmup-multiple"),
    pytest.param(7, 5, 4, 0, [1, 2, 3], id="no-warmup-not-multiple"),
    pytest.param(8, 3, 4, 16, [1], id="warmup-shifts-the-phase"),
])
def test_pending_boundaries(batches, epochs, accumulate, warmup, expected):
    assert classify.pending_boundaries(batches, epochs, accumulate, warmup) == expected


def test_dataset_forms_names_dict_image_list_and_test_split(tmp_path):
    data = {"names": {0: "rectangle", 1: "ellipse", 2: "triangle"}, "train": "train.txt",
            "val": ["images/val"], "test": "images/val"}
    root = tmp_path / "ds"
    synth_dataset(root, train=3, val=2, imgsz=32, seed=1)
    (root / "train.txt").write_text("".join(f"./images/train/{p.name}\n"
                                            for p in sorted((root / "images" / "train").iterdir())))
    (root / "data.yaml").write_text(yaml.safe_dump(data))  # no `path`: the YAML's folder
    info = validate_dataset(root / "data.yaml")
    assert info.names == ("rectangle", "ellipse", "triangle")
    assert (info.images("train"), info.images("val"), info.images("test")) == (3, 2, 2)
    assert info.resolved_data()["path"] == str(root.resolve())


def test_missing_labels_and_polygons_are_accepted(tmp_path):
    root = tmp_path / "ds"
    synth_dataset(root, train=3, val=1, imgsz=32, relative_path=True)
    (root / "labels" / "train" / "train_00000.txt").unlink()
    (root / "labels" / "train" / "train_00001.txt").write_text("1 0.1 0.1 0.4 0.1 0.3 0.4\n")
    info = validate_dataset(root / "data.yaml")
    assert info.splits["train"].labelled == 2
    assert any("1 of 3 images have no label file" in w for w in info.warnings)


def test_label_scan_is_capped_and_says_so(tmp_path):
    root = tmp_path / "ds"
    synth_dataset(root, train=10, val=1, imgsz=32)
    info = validate_dataset(root / "data.yaml", limit=4)
    assert info.splits["train"].checked == 4 and info.images("train") == 10
    assert any("checked the labels of 4 of 10 images" in w for w in info.warnings)


@pytest.mark.parametrize("error_type, call", [
    pytest.param(SpecError, lambda: analyse_file("/no/such/spec.yaml"), id="spec-missing"),
    pytest.param(DatasetError, lambda: validate_dataset("/no/such/data.yaml"), id="data-missing"),
    pytest.param(ModelError, lambda: resolve_model_name("yolov8q.yaml"), id="model-unknown"),
])
def test_errors_are_user_errors(error_type, call):
    with pytest.raises(error_type) as caught:
        call()
    assert "\n" not in caught.value.line()

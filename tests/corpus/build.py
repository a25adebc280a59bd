"""Build one corpus case from `cases.yaml`: a synthetic dataset, a spec, and the case's mutations."""

from __future__ import annotations

import io
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import yaml

CASES_FILE = Path(__file__).with_name("cases.yaml")


def load_manifest() -> dict[str, Any]:
    return yaml.safe_load(CASES_FILE.read_text())


def build_case(case: dict[str, Any], base_spec: dict[str, Any], dataset: Path, where: Path,
               checkpoints: dict[str, Path]) -> tuple[Path, list[str]]:
    """Write the case under `where`; return (spec path, extra CLI args)."""
    spec_path, extra = _build(case, base_spec, dataset, where, checkpoints)
    for rel, target in case.get("symlink", {}).items():
        link = where / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            shutil.rmtree(link) if link.is_dir() and not link.is_symlink() else link.unlink()
        link.symlink_to(target)
    return spec_path, extra


def argv_for(case: dict[str, Any], spec: Path, extra: list[str]) -> list[str]:
    """The command line: `analyse SPEC ARGS...`, or the case's own `argv` with {spec}, {ds}, {tmp} filled in."""
    if "argv" not in case:
        return ["analyse", str(spec), *extra]
    where = spec.parent
    return [str(a).format(spec=spec, ds=where / "ds", tmp=where) for a in case["argv"]]


def _build(case: dict[str, Any], base_spec: dict[str, Any], dataset: Path, where: Path,
           checkpoints: dict[str, Path]) -> tuple[Path, list[str]]:
    ds = where / "ds"
    shutil.copytree(dataset, ds)
    _mutate_dataset(case, ds)
    spec = dict(base_spec)
    if "model_file" in case:
        shutil.copyfile(checkpoints[case["model_file"]], where / "model.pt")
        spec["model"] = "model.pt"
    spec.update(case.get("spec_set", {}))
    for key in case.get("spec_del", []):
        spec.pop(key, None)
    spec_path = where / case.get("spec_name", "job.yaml")
    if "spec_bytes" in case:
        spec_path.write_bytes(bytes.fromhex(case["spec_bytes"]))
    else:
        spec_path.write_text(case["spec_text"] if "spec_text" in case else yaml.safe_dump(spec, sort_keys=False))
    return spec_path, [str(a) for a in case.get("args", [])]


def _mutate_dataset(case: dict[str, Any], ds: Path) -> None:
    for rel, text in case.get("write", {}).items():
        (ds / rel).parent.mkdir(parents=True, exist_ok=True)
        (ds / rel).write_text(text)
    for rel in case.get("delete", []):
        target = ds / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    for rel in case.get("empty", []):
        for child in (ds / rel).iterdir():
            child.unlink()
    data_yaml = ds / "data.yaml"
    if "data_text" in case:
        data_yaml.write_text(case["data_text"])
        return
    data = yaml.safe_load(data_yaml.read_text())
    data.update(case.get("data_set", {}))
    for key in case.get("data_del", []):
        data.pop(key, None)
    data_yaml.write_text(yaml.safe_dump(data, sort_keys=False))


def write_fake_checkpoints(folder: Path) -> dict[str, Path]:
    """The malformed checkpoints that need no torch to write."""
    folder.mkdir(parents=True, exist_ok=True)
    not_zip = folder / "not_zip.pt"
    not_zip.write_bytes(b"\x80\x02this is not a zip archive at all")
    no_pkl = folder / "no_pkl.pt"
    with zipfile.ZipFile(no_pkl, "w") as archive:
        archive.writestr("archive/version", "3\n")
    not_ultralytics = folder / "not_ultralytics.pt"
    buffer = io.BytesIO()
    pickle.dump({"state_dict": {"conv.weight": [0.1, 0.2]}, "epoch": 3}, buffer, protocol=2)
    with zipfile.ZipFile(not_ultralytics, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/version", "3\n")
    return {"not_zip": not_zip, "no_pkl": no_pkl, "not_ultralytics": not_ultralytics}

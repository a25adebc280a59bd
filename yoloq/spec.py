"""The job spec: what a user submits, loaded from YAML or JSON and validated.

Validation here covers the spec's own shape and ranges. The dataset and the
model are checked by `yoloq.analysis`, which also needs no torch.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from yoloq.errors import SpecError
from yoloq.tiers import TIER_NAMES, Tier

EXPORT_FORMATS = ("torchscript", "onnx")
# Arguments yoloq owns: set at the top level of the spec, or managed by yoloq.
_OWNED_TRAIN_ARGS = {
    "model": "set `model` at the top level",
    "data": "set `data` at the top level",
    "epochs": "set `epochs` at the top level",
    "imgsz": "set `imgsz` at the top level",
    "batch": "set `batch` at the top level",
    "resume": "remove it: yoloq resumes jobs itself",
    "project": "remove it: yoloq chooses where runs are stored",
    "name": "set `name` at the top level",
    "exist_ok": "remove it: yoloq manages run folders",
    "save_dir": "remove it: yoloq manages run folders",
    "mode": "remove it: a job always trains",
    "task": "remove it: the task comes from the model",
}
# Boolean arguments whose value yoloq reads (others, like `cache`, also accept strings).
_BOOL_TRAIN_ARGS = {"amp", "deterministic", "cos_lr", "single_cls", "rect", "val", "plots"}
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class JobSpec(BaseModel):
    """A YOLO training job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Job name: lowercase letters, digits, '.', '_' or '-'.")
    team: str = Field(description="Team that owns the job (fair share and quotas).")
    priority: str = Field(default="normal", description="urgent | high | normal | low")
    model: str = Field(description="A model YAML name (yolov8n.yaml, yolo11s.yaml) or a .pt path.")
    data: str = Field(description="Path to the dataset YAML.")
    epochs: int = Field(default=10, ge=1, le=10000)
    imgsz: int = Field(default=640, ge=32, le=4096)
    batch: int = Field(default=16, ge=1, le=4096)
    segment_epochs: int | None = Field(default=None, ge=1, le=10000,
                                       description="Epochs per segment; default from the estimate.")
    export: list[str] = Field(default_factory=lambda: ["torchscript"])
    train_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name", "team")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not _NAME_PATTERN.match(value):
            raise ValueError("use lowercase letters, digits, '.', '_' or '-' (at most 63)")
        return value

    @field_validator("priority")
    @classmethod
    def _tier(cls, value: str) -> str:
        if str(value).lower() not in TIER_NAMES:
            raise ValueError(f"use one of: {', '.join(TIER_NAMES)}")
        return str(value).lower()

    @field_validator("imgsz")
    @classmethod
    def _stride(cls, value: int) -> int:
        if value % 32:
            raise ValueError(f"must be a multiple of 32 (try {max(32, round(value / 32) * 32)})")
        return value

    @field_validator("export")
    @classmethod
    def _formats(cls, value: list[str]) -> list[str]:
        for fmt in value:
            if fmt not in EXPORT_FORMATS:
                raise ValueError(f"unknown format {fmt!r}; use {' or '.join(EXPORT_FORMATS)}")
        return value

    @field_validator("train_args")
    @classmethod
    def _train_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = _train_args_problem(value)
        if problem:
            raise ValueError(f"{problem[0]}: {problem[1]}")
        return value

    @property
    def tier(self) -> Tier:
        return Tier.parse(self.priority)

    @property
    def seed(self) -> int:
        return int(self.train_args.get("seed", 0))


@functools.lru_cache(maxsize=1)
def ultralytics_train_defaults() -> dict[str, Any]:
    """ultralytics' arguments and defaults, read from its default.yaml without importing it."""
    found = importlib.util.find_spec("ultralytics")
    if found is None or not found.submodule_search_locations:
        return {}
    cfg = Path(list(found.submodule_search_locations)[0]) / "cfg" / "default.yaml"
    return dict(yaml.safe_load(cfg.read_text()))


def ultralytics_train_args() -> frozenset[str]:
    """ultralytics' own argument names."""
    return frozenset(ultralytics_train_defaults())


def _train_args_problem(value: dict[str, Any]) -> tuple[str, str, str] | None:
    """(key, problem, fix) for the first bad `train_args` entry, or None."""
    defaults = ultralytics_train_defaults()
    for key, given in value.items():
        key = str(key)
        if key in _OWNED_TRAIN_ARGS:
            return key, "is set by yoloq, not in train_args", _OWNED_TRAIN_ARGS[key]
        if defaults and key not in defaults:
            return key, "unknown ultralytics argument" + _suggest(key, defaults), \
                "see ultralytics' train settings (cfg/default.yaml)"
        expected = defaults.get(key)
        if _is_number(expected) and not _is_number(given):
            return key, f"must be a number, not {given!r}", f"write e.g. `{key}: {expected}`"
        if key in _BOOL_TRAIN_ARGS and not isinstance(given, bool):
            return key, f"must be true or false, not {given!r}", f"write `{key}: {str(expected).lower()}`"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _suggest(key: str, candidates: "set[str] | frozenset[str] | list[str]") -> str:
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def load_spec(path: str | Path) -> JobSpec:
    """Load and validate a spec file. Raises SpecError with one clear line."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("spec", f"file not found: {path}", "give the path to a YAML or JSON job spec")
    raw = _parse(path)
    spec = parse_spec(raw, base_dir=path.parent)
    return spec


def parse_spec(raw: Any, base_dir: Path | None = None) -> JobSpec:
    """Validate a mapping as a JobSpec; relative `data`/`model` paths resolve from base_dir."""
    if not isinstance(raw, dict):
        raise SpecError("spec", "must be a mapping of fields", "write `name: ...`, `team: ...` and so on")
    fields = set(JobSpec.model_fields)
    for key in raw:
        if key not in fields:
            raise SpecError(str(key), "unknown field" + _suggest(str(key), fields),
                            f"valid fields: {', '.join(sorted(fields))}")
    train_args = raw.get("train_args")
    if isinstance(train_args, dict):
        problem = _train_args_problem(train_args)
        if problem:
            raise SpecError(f"train_args.{problem[0]}", problem[1], problem[2])
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc) from None
    return _resolve_paths(spec, base_dir) if base_dir else spec


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("spec", f"cannot read {path}: {exc}", "give a readable UTF-8 YAML or JSON file") from None
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None) or getattr(exc, "lineno", None)
        line = where.line + 1 if hasattr(where, "line") else where
        raise SpecError("spec", f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}"
                        f" (line {line})", "fix the syntax") from None


def _first_error(exc: ValidationError) -> SpecError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "spec"
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return SpecError(field, "required field is missing", f"add `{field}:` to the spec")
    return SpecError(field, message, _fix_for(err))


def _fix_for(err: dict[str, Any]) -> str | None:
    ctx = err.get("ctx") or {}
    if "ge" in ctx:
        return f"use a value >= {ctx['ge']}"
    if "le" in ctx:
        return f"use a value <= {ctx['le']}"
    if err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        return "use a value of the right type"
    return None


def _resolve_paths(spec: JobSpec, base_dir: Path) -> JobSpec:
    updates: dict[str, str] = {}
    data = Path(spec.data).expanduser()
    if not data.is_absolute():
        updates["data"] = str((base_dir / data).resolve())
    model = Path(spec.model).expanduser()
    if spec.model.endswith(".pt") and not model.is_absolute():
        updates["model"] = str((base_dir / model).resolve())
    return spec.model_copy(update=updates) if updates else spec

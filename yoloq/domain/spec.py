"""The job spec: what a user submits, loaded from YAML or JSON and validated.

Validation here covers the spec's own shape and ranges. The dataset and the
model are checked by `yoloq.analysis`, which also needs no torch.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from yoloq.base.errors import SpecError
from yoloq.domain.contract import JOB_WEIGHTS_PREFIX as JOB_REF_PREFIX
from yoloq.domain.tiers import TIER_NAMES, Tier
from yoloq.settings import settings

EXPORT_FORMATS = ("torchscript", "onnx")
MAX_BATCH = 4096  # the spec's upper limit for `batch` (estimates never report more)
WEIGHTS_DIR_ENV = "YOLOQ_WEIGHTS_DIR"  # a folder where `yolov8n.pt` (a bare name) resolves
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
# Words users reach for, and the field they mean (`tier` is what the README calls a priority).
_FIELD_ALIASES = {
    "tier": "priority", "queue": "priority", "prio": "priority", "batch_size": "batch",
    "img_size": "imgsz", "image_size": "imgsz", "imgsize": "imgsz", "dataset": "data",
    "weights": "model", "args": "train_args", "hyp": "train_args", "hyperparameters": "train_args",
    "exports": "export", "formats": "export", "epochs_per_segment": "segment_epochs",
}
_INT_FIELDS = ("epochs", "imgsz", "batch", "segment_epochs")


JOB_WEIGHTS = ("best", "last")


@dataclass(frozen=True)
class JobWeightsRef:
    """`model: job:<id>[:best|:last]`: the weights of a finished job, from the checkpoint store
    (resolved on each node by `blocks.job_weights`)."""

    job_id: str
    which: str = "best"  # best.pt, or the last epoch's weights


def parse_job_ref(model: str) -> JobWeightsRef | None:
    """The job reference in a spec's `model`, None when it names a file or a YAML; a malformed
    one raises ValueError."""
    if not model.startswith(JOB_REF_PREFIX):
        return None
    job_id, _, which = model[len(JOB_REF_PREFIX):].partition(":")
    if not job_id or (which and which not in JOB_WEIGHTS):
        raise ValueError(f"{model!r} is not a job reference; write job:<id>, job:<id>:best or job:<id>:last")
    return JobWeightsRef(job_id, which or "best")


class JobSpec(BaseModel):
    """A YOLO training job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Job name: lowercase letters, digits, '.', '_' or '-'.")
    team: str = Field(description="Team that owns the job (fair share and quotas).")
    priority: str = Field(default="normal", description="urgent | high | normal | low")
    model: str = Field(description="A model YAML name (yolov8n.yaml, yolo11s.yaml), a .pt path, or "
                                   "job:<id>[:best|:last] (a finished job's weights, fine-tuned from).")
    data: str = Field(description="Path to the dataset YAML; for a classification model, the dataset's folder "
                                  "(train/<class>/, val/<class>/).")
    epochs: int = Field(default=10, ge=1, le=10000, strict=True)
    imgsz: int = Field(default=640, ge=32, le=4096, strict=True)
    batch: int = Field(default=16, ge=1, le=MAX_BATCH, strict=True)
    segment_epochs: int | None = Field(default=None, ge=1, le=10000, strict=True,
                                       description="Epochs per segment (at most `epochs`); default from "
                                                   "the estimate.")
    export: list[str] = Field(default_factory=lambda: ["torchscript"])
    train_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name", "team")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not _NAME_PATTERN.match(value):
            raise ValueError("use lowercase letters, digits, '.', '_' or '-' (at most 63)")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if value.startswith(JOB_REF_PREFIX):
            parse_job_ref(value)  # raises ValueError naming the fix
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

    @model_validator(mode="after")
    def _segment_within_job(self) -> JobSpec:
        if self.segment_epochs is not None and self.segment_epochs > self.epochs:
            raise ValueError(f"segment_epochs: {self.segment_epochs} is more than the job's {self.epochs} epochs")
        return self

    @property
    def tier(self) -> Tier:
        return Tier.parse(self.priority)

    @property
    def seed(self) -> int:
        return int(self.train_args.get("seed", 0))


def ultralytics_train_defaults() -> dict[str, Any]:
    """ultralytics' arguments and defaults, read from its default.yaml without importing it."""
    from yoloq.analysis.ultralytics_cfg import tables

    return tables().defaults


def ultralytics_train_args() -> frozenset[str]:
    """ultralytics' own argument names."""
    return frozenset(ultralytics_train_defaults())


def _train_args_problem(value: dict[str, Any]) -> tuple[str, str, str] | None:
    """(key, problem, fix) for the first bad `train_args` entry, or None (see analysis.train_args)."""
    from yoloq.analysis.train_args import first_problem

    return first_problem(value)


def _suggest(key: str, candidates: set[str] | frozenset[str] | list[str]) -> str:
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _unknown_field(key: str, value: Any, fields: set[str]) -> SpecError:
    """An unknown top-level key, with the nearest field or where it belongs."""
    if key.lower() in _FIELD_ALIASES:
        field = _FIELD_ALIASES[key.lower()]
        return SpecError(key, f"unknown field; did you mean {field!r}?", f"write `{field}: {_short(value)}`")
    from yoloq.analysis.train_args import OWNED, REFUSED

    if key in OWNED:
        return SpecError(key, "is not a spec field (yoloq manages it)", OWNED[key])
    if key in REFUSED:
        return SpecError(key, f"is not a spec field, and {REFUSED[key][0]}", REFUSED[key][1])
    if key in ultralytics_train_defaults():
        return SpecError(key, "is an ultralytics train argument, not a spec field",
                         f"move it under train_args: `train_args: {{{key}: {_short(value)}}}`")
    return SpecError(key, "unknown field" + _suggest(key, fields), f"valid fields: {', '.join(sorted(fields))}")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _bool_as_number(raw: dict[str, Any]) -> SpecError | None:
    """YAML `epochs: true` is a bool, which Python would count as 1: refused."""
    for key in _INT_FIELDS:
        if isinstance(raw.get(key), bool):
            default = JobSpec.model_fields[key].default
            return SpecError(key, f"must be a whole number, not {str(raw[key]).lower()}",
                             f"write e.g. `{key}: {default if default is not None else 5}`")
    return None


def load_spec(path: str | Path) -> JobSpec:
    """Load and validate a spec file. Raises SpecError with one clear line."""
    path = Path(path)
    problem = _stat_problem(path)
    if problem:
        raise SpecError("spec", f"{problem}: {str(path)[:200]}", "give the path to a YAML or JSON job spec")
    raw = _parse(path)
    spec = parse_spec(raw, base_dir=path.parent)
    return spec


def _stat_problem(path: Path) -> str | None:
    """None for a regular file, else what is wrong with the path, in a few words."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "file not found"
        return "symlink loop" if exc.errno == errno.ELOOP else f"cannot access it ({exc.strerror})"
    return None if stat.S_ISREG(mode) else "not a file"


def parse_spec(raw: Any, base_dir: Path | None = None) -> JobSpec:
    """Validate a mapping as a JobSpec; relative `data`/`model` paths resolve from base_dir."""
    if not isinstance(raw, dict):
        raise SpecError("spec", "must be a mapping of fields", "write `name: ...`, `team: ...` and so on")
    fields = set(JobSpec.model_fields)
    for key, value in raw.items():
        if key not in fields:
            raise _unknown_field(str(key), value, fields)
    wrong = _bool_as_number(raw)
    if wrong:
        raise wrong
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
    from yoloq.analysis.strict_yaml import DuplicateKey, load_json, load_yaml

    try:
        return load_json(text) if path.suffix == ".json" else load_yaml(text)
    except DuplicateKey as exc:
        raise SpecError(str(exc.key), f"given twice (lines {exc.first_line} and {exc.second_line}); "
                        "the spec must say it once", "delete one of them") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None) or getattr(exc, "lineno", None)
        line = where.line + 1 if hasattr(where, "line") else where
        raise SpecError("spec", f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}"
                        f" (line {line})", "fix the syntax") from None


def _first_error(exc: ValidationError) -> SpecError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "spec"
    message = err["msg"].removeprefix("Value error, ")
    if not err["loc"] and message.startswith("segment_epochs: "):
        return SpecError("segment_epochs", message.split(": ", 1)[1],
                         "make segment_epochs at most epochs, or remove it")
    if err["type"] == "missing":
        return SpecError(field, "required field is missing", f"add `{field}:` to the spec")
    if field == "batch" and _is_autobatch(err.get("input")):
        return SpecError("batch", f"{err['input']!r} is ultralytics' autobatch, which yoloq does not support: "
                         "the scheduler places a job by the memory of a fixed batch, and exact resume needs "
                         "the same batch in every segment", "give a positive batch, e.g. batch: 16")
    return SpecError(field, message, _fix_for(err))


def _is_autobatch(value: Any) -> bool:
    """ultralytics' autobatch: batch -1 (60% of GPU memory) or a fraction such as 0.7."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (value == -1 or 0 < value < 1))


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
    """Relative `data`, `.pt` model and `pretrained` paths, made absolute from the spec's folder.

    A bare weights name (`yolov8n.pt`) that is not next to the spec resolves in
    $YOLOQ_WEIGHTS_DIR when it is there. Nothing is downloaded; whether the file exists
    is checked by the analysis.
    """
    updates: dict[str, Any] = {}
    data = Path(spec.data).expanduser()
    if "://" not in spec.data and not data.is_absolute():  # s3://... stays a URI
        updates["data"] = os.path.abspath(base_dir / data)
    if spec.model.lower().endswith(".pt"):
        updates["model"] = str(resolve_weights(spec.model, base_dir))
    pretrained = spec.train_args.get("pretrained")
    if isinstance(pretrained, str):
        updates["train_args"] = {**spec.train_args, "pretrained": str(resolve_weights(pretrained, base_dir))}
    return spec.model_copy(update=updates) if updates else spec


def resolve_weights(name: str, base_dir: Path) -> Path:
    """A weights file: absolute as given; else next to the spec; else a bare name in $YOLOQ_WEIGHTS_DIR."""
    given = Path(name).expanduser()
    if given.is_absolute():
        return given
    local = Path(os.path.abspath(base_dir / given))
    folder = settings().weights_dir
    if not os.path.lexists(local) and folder and len(given.parts) == 1:
        shared = Path(os.path.abspath(Path(folder).expanduser() / given))
        if os.path.lexists(shared):
            return shared
    return local

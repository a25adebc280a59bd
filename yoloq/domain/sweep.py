"""Many jobs from one command: `key=value` overrides and sweep files (a base spec plus a grid).

Pure admission code (no Prefect, no torch): it turns the command line of `yoloq submit` into
planned jobs, each a validated `JobSpec` or the one error that stops it.

Overrides work like `yolo train key=value`: the value is read as YAML (`epochs=5` is a number,
`amp=false` a boolean, `export=[onnx]` a list, `1e-3` a number too). A key is a top-level spec
field (`epochs`, `model`, ...), `train_args.KEY`, or a bare ultralytics train argument
(`lr0=0.01`), which goes under `train_args` by itself. Anything else is refused with the same
message as the same key in a spec file.

A sweep file is recognised by its `grid` key:

    base: base.yaml                    # a spec file (relative to the sweep) or an inline spec
    grid:                              # every combination becomes one job
      lr0: [0.01, 0.001]
      model: [yolov8n.yaml, yolo11n.yaml]
    name: "{name}-{model}-lr{lr0}"     # optional; fields: name (the base's), index, grid keys

The names are lowercased and every run of characters other than letters, digits, '.', '_'
and '-' becomes '-'; two jobs of one sweep may not get the same name.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from yoloq.base.errors import SpecError, UserError
from yoloq.domain.spec import (
    JobSpec,
    _parse,
    _stat_problem,
    _unknown_field,
    parse_spec,
    ultralytics_train_args,
)

SWEEP_KEYS = ("base", "grid", "name")
MAX_SWEEP_JOBS = 1000  # a grid larger than this is refused (a typo of a list, most likely)
_OVERRIDE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)=(.*)$", re.DOTALL)
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # YAML 1.1 reads `1e-3` as a string
_NOT_NAME = re.compile(r"[^a-z0-9._-]+")
_NAME_MAX = 63
_SUFFIXES = (".yaml", ".yml", ".pt", ".json")

Override = tuple[str, Any]


@dataclass(frozen=True)
class Planned:
    """One job to be: its spec, or the error that stops it; `source` names it in messages."""

    source: str
    spec: JobSpec | None = None
    error: UserError | None = None
    point: dict[str, Any] = field(default_factory=dict)  # its grid values (empty for a plain spec)


# --- the command line -------------------------------------------------------------------------

def is_override(arg: str) -> bool:
    """`key=value` (and not the name of an existing file)."""
    return bool(_OVERRIDE.match(arg)) and not os.path.lexists(arg)


def split_items(items: list[str]) -> tuple[list[str], list[Override]]:
    """(spec paths, overrides) from the positional arguments of `yoloq submit`."""
    paths = [item for item in items if not is_override(item)]
    overrides = [parse_override(item) for item in items if is_override(item)]
    if not paths:
        raise SpecError("spec", "no spec file given, only overrides",
                        "write `yoloq submit SPEC [SPEC ...] [key=value ...]`")
    keys = [key for key, _ in overrides]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice:
        raise SpecError(twice, "overridden twice on the command line", f"give {twice}=VALUE once")
    return paths, overrides


def parse_override(arg: str) -> Override:
    """`key=value` -> (key, value read as YAML)."""
    match = _OVERRIDE.match(arg)
    if not match:
        raise SpecError("override", f"{arg[:60]!r} is not key=value", "write e.g. epochs=5 or lr0=0.01")
    key, text = match.group(1), match.group(2)
    return key, parse_value(key, text)


def parse_value(key: str, text: str) -> Any:
    """A value as `yolo train key=value` reads it: YAML, with `1e-3` a number."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise SpecError(key, f"the value {text[:40]!r} is not valid YAML",
                        f"quote it: {key}='\"...\"'") from None
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return value


# --- where a key goes ----------------------------------------------------------------------------

def key_path(key: str, value: Any = None) -> tuple[str, ...]:
    """Where `key` goes in a spec: (field,) or ("train_args", argument). Raises the spec's message."""
    fields = set(JobSpec.model_fields)
    if "." in key:
        head, argument = key.split(".", 1)
        if head != "train_args":
            raise SpecError(key, "only train_args takes a dotted key",
                            f"write train_args.ARGUMENT=VALUE or a top-level field ({', '.join(sorted(fields))})")
        return ("train_args", argument)
    if key in fields:
        return (key,)
    from yoloq.analysis.train_args import OWNED, REFUSED

    known = key in ultralytics_train_args()
    if known and key not in OWNED and key not in REFUSED:
        return ("train_args", key)
    error = _unknown_field(key, value, fields)
    if not known and "did you mean" not in error.problem:
        close = difflib.get_close_matches(key, sorted(ultralytics_train_args()), n=1, cutoff=0.75)
        if close:
            raise SpecError(key, f"unknown field or train argument; did you mean {close[0]!r}?",
                            f"write {close[0]}=...")
    raise error


def apply_overrides(raw: dict[str, Any], overrides: list[Override]) -> dict[str, Any]:
    """A copy of the raw spec mapping with each override set where its key belongs."""
    out = copy.deepcopy(raw)
    for key, value in overrides:
        path = key_path(key, value)
        if len(path) == 1:
            out[path[0]] = value
            continue
        args = out.get("train_args") or {}
        if not isinstance(args, dict):
            raise SpecError("train_args", "must be a mapping to take an override",
                            "write `train_args: {lr0: 0.01}` in the spec")
        out["train_args"] = {**args, path[1]: value}
    return out


# --- planning -----------------------------------------------------------------------------------

def plan(paths: list[str], overrides: list[Override]) -> list[Planned]:
    """Every job the spec and sweep files describe, in order; the overrides apply to each."""
    jobs: list[Planned] = []
    for path in paths:
        jobs += plan_file(path, overrides)
    return jobs


def plan_file(path: str, overrides: list[Override]) -> list[Planned]:
    try:
        raw = load_raw(Path(path))
        if is_sweep(raw):
            return expand_sweep(raw, Path(path), overrides)
        return [build(path, raw, Path(path).parent, overrides)]
    except UserError as exc:
        return [Planned(path, error=exc)]


def build(source: str, raw: Any, base_dir: Path, overrides: list[Override],
          point: dict[str, Any] | None = None) -> Planned:
    """Validate one job's spec (overrides applied); an error is kept, not raised."""
    try:
        if isinstance(raw, dict):
            raw = apply_overrides(raw, overrides)
        return Planned(source, spec=parse_spec(raw, base_dir=base_dir), point=point or {})
    except UserError as exc:
        return Planned(source, error=exc, point=point or {})


def load_raw(path: Path) -> Any:
    """A spec or sweep file's parsed YAML/JSON (strict: duplicate keys refused)."""
    problem = _stat_problem(path)
    if problem:
        raise SpecError("spec", f"{problem}: {str(path)[:200]}", "give the path to a YAML or JSON job spec")
    return _parse(path)


def is_sweep(raw: Any) -> bool:
    return isinstance(raw, dict) and "grid" in raw


# --- sweeps --------------------------------------------------------------------------------------

def expand_sweep(raw: dict[str, Any], path: Path, overrides: list[Override]) -> list[Planned]:
    """One Planned per grid point, named; raises for a problem of the sweep file itself."""
    _check_sweep_keys(raw)
    base, base_dir = _base(raw, path)
    grid = _grid(raw.get("grid"))
    clash = next((key for key, _ in overrides if _short_key(key) in grid or key == "name"), None)
    if clash:
        raise SpecError(clash, "is both set by the sweep (grid or name template) and a command-line override",
                        "drop one of them")
    template = _template(raw.get("name"), list(grid))
    base_name = str(base.get("name") or _slug(path.stem))
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    names = [job_name(template, base_name, point, index) for index, point in enumerate(points, 1)]
    _check_unique(names)
    jobs = []
    for index, (point, name) in enumerate(zip(points, names, strict=True), 1):
        settings = [(grid_keys_full(raw, key), value) for key, value in point.items()]
        job_raw = {**base, "name": name}
        jobs.append(build(f"{path} job {index} ({name})", job_raw, base_dir, settings + overrides, point))
    return jobs


def grid_keys_full(raw: dict[str, Any], short: str) -> str:
    """The grid's own spelling of a key (`train_args.lr0` or `lr0`) from its short name."""
    return next(key for key in raw["grid"] if _short_key(str(key)) == short)


def _check_sweep_keys(raw: dict[str, Any]) -> None:
    for key in raw:
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(str(key), SWEEP_KEYS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(str(key), f"unknown sweep field{hint}",
                            "a sweep has `base` (a spec file or an inline spec), `grid` and an optional `name`; "
                            "put spec fields in the base")


def _base(raw: dict[str, Any], path: Path) -> tuple[dict[str, Any], Path]:
    """(the base spec's mapping, the folder its relative paths resolve from)."""
    base = raw.get("base")
    if base is None:
        raise SpecError("base", "required field is missing", "write `base: base.yaml` or an inline spec")
    if isinstance(base, dict):
        return base, path.parent
    if not isinstance(base, str):
        raise SpecError("base", "must be a spec file name or an inline spec", "write `base: base.yaml`")
    base_path = path.parent / Path(base).expanduser()
    try:
        loaded = load_raw(base_path)
    except UserError as exc:
        raise SpecError("base", exc.problem, exc.fix) from None
    if not isinstance(loaded, dict) or is_sweep(loaded):
        raise SpecError("base", f"{base} is not a job spec", "point `base` at a plain spec file (no grid)")
    return loaded, base_path.parent


def _grid(grid: Any) -> dict[str, list[Any]]:
    """The grid as {short key: values}, each key checked; at most MAX_SWEEP_JOBS points."""
    if not isinstance(grid, dict) or not grid:
        raise SpecError("grid", "must be a mapping of keys to lists of values", "write `grid: {lr0: [0.01, 0.001]}`")
    out: dict[str, list[Any]] = {}
    for key, values in grid.items():
        key = str(key)
        if key == "name":
            raise SpecError("grid.name", "names come from the sweep's `name` template", "remove it from the grid")
        try:
            key_path(key, values)
        except UserError as exc:
            raise SpecError(f"grid.{exc.field}", exc.problem, exc.fix) from None
        if not isinstance(values, list) or not values:
            raise SpecError(f"grid.{key}", "must be a non-empty list of values",
                            f"write `{key}: [{_short(values)}]`")
        if _short_key(key) in out:
            raise SpecError(f"grid.{key}", "given twice (bare and under train_args)", "keep one spelling")
        out[_short_key(key)] = values
    total = 1
    for values in out.values():
        total *= len(values)
    if total > MAX_SWEEP_JOBS:
        raise SpecError("grid", f"expands to {total} jobs, more than {MAX_SWEEP_JOBS}",
                        "split the sweep into several files")
    return out


def _short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _template(template: Any, keys: list[str]) -> str | None:
    """The naming template, its fields checked; None for the default names."""
    if template is None:
        return None
    if not isinstance(template, str) or not template.strip():
        raise SpecError("name", "must be a naming template", 'write e.g. `name: "{name}-lr{lr0}"`')
    allowed = {"name", "index", *keys}
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise SpecError("name", f"not a valid template ({exc})", 'write e.g. `name: "{name}-lr{lr0}"`') from None
    for name in fields:
        if name not in allowed:
            raise SpecError("name", f"the template names {{{name}}}, which is not a grid key",
                            f"use {{{'}, {'.join(sorted(allowed))}}}")
    return template


def job_name(template: str | None, base_name: str, point: dict[str, Any], index: int) -> str:
    """A grid point's job name: the template's, or `{name}-{key}_{value}-...`, as a valid name."""
    if template is not None:
        text = template.format(name=base_name, index=index, **{k: _text(v) for k, v in point.items()})
        return _slug(text)
    parts = [base_name] + [f"{key}_{_readable(value)}" for key, value in point.items()]
    name = _slug("-".join(parts))
    if len(name) > _NAME_MAX:  # too long to read anyway: keep the start, add the index
        name = f"{name[:_NAME_MAX - 5].rstrip('-._')}-{index:04d}"
    return name


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _readable(value: Any) -> str:
    """A short form of a grid value for a default name: `yolov8n.yaml` -> `yolov8n`."""
    if isinstance(value, str) and value.lower().endswith(_SUFFIXES):
        return Path(value).stem
    if isinstance(value, list):
        return "+".join(_readable(v) for v in value)
    return _text(value)


def _slug(text: str) -> str:
    return _NOT_NAME.sub("-", text.lower()).strip("-")


def _check_unique(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise SpecError("name", f"the naming template gives {name!r} to more than one job",
                            "put every grid key in the `name` template")
        seen.add(name)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 30 else text[:27] + "..."

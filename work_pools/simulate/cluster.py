"""`--cluster SPEC`: a shorthand ("8xA100-80GB,4xV100-32GB") or a YAML/JSON file:

    gpus:
      - {type: A100-80GB, count: 8}
      - {type: V100-32GB, count: 4}

Types are names from `yoloq.domain.gpus.CATALOG` (NVML-style names work too).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from work_pools.policy.model import Gpu
from yoloq.base.errors import UserError
from yoloq.domain.gpus import lookup

_PART = re.compile(r"^\s*(?:(\d+)\s*[xX*]\s*)?([A-Za-z0-9_.\- ]+?)\s*$")


def parse_cluster(spec: str) -> tuple[Gpu, ...]:
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        return _from_file(path)
    return _build([_parse_part(part) for part in spec.split(",") if part.strip()])


def _parse_part(part: str) -> tuple[str, int]:
    match = _PART.match(part)
    if not match:
        raise UserError("--cluster", f"cannot read {part!r}", "write COUNTxTYPE, e.g. 8xA100-80GB")
    count = int(match.group(1) or 1)
    if count < 1:
        raise UserError("--cluster", f"{part.strip()!r} has no GPUs",
                        "write a count >= 1, e.g. 8xA100-80GB")
    return match.group(2), count


def _from_file(path: Path) -> tuple[Gpu, ...]:
    if not path.is_file():
        raise UserError("--cluster", f"file not found: {path}", "give a file or 8xA100-80GB,...")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError("--cluster", f"{path} is not a text file",
                        "give a YAML/JSON file or 8xA100-80GB,...") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise UserError("--cluster", f"{path}: YAML syntax error{line}",
                        "fix the file; expected `gpus: [{type: A100-80GB, count: 8}]`") from None
    entries = raw.get("gpus", raw) if isinstance(raw, dict) else raw
    if isinstance(entries, dict):
        entries = [{"type": k, "count": v} for k, v in entries.items()]
    try:
        parts = [(str(e["type"]), _count(e.get("count", 1))) for e in entries]
    except (TypeError, KeyError, ValueError, AttributeError):
        raise UserError("--cluster", f"{path}: expected `gpus: [{{type: ..., count: ...}}]`",
                        "see `yoloq simulate --help`") from None
    return _build(parts)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError("--cluster", f"count must be a whole number >= 1, not {value!r}",
                        "e.g. {type: A100-80GB, count: 8}")
    return value


def _build(parts: list[tuple[str, int]]) -> tuple[Gpu, ...]:
    gpus: list[Gpu] = []
    for name, count in parts:
        try:
            kind = lookup(name)
        except KeyError as exc:
            hint = getattr(exc, "hint", "use a name from yoloq.domain.gpus, e.g. A100-80GB")
            raise UserError("--cluster", f"unknown GPU type {name!r}", hint) from None
        for _ in range(count):
            i = len(gpus)
            gpus.append(Gpu(i, kind.name, kind.mem_gb, kind.mem_gb, kind.speed, f"SIM-{i:04d}"))
    if not gpus:
        raise UserError("--cluster", "no GPUs given", "e.g. 8xA100-80GB,4xV100-32GB")
    return tuple(gpus)

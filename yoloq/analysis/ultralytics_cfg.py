"""ultralytics' own argument tables, read from the installed package's files without importing it.

Importing `ultralytics.cfg` imports torch (seconds, and half a GB), which admission must
not do. So the tables its `check_cfg` uses (`CFG_FLOAT_KEYS`, `CFG_FRACTION_KEYS`,
`CFG_INT_KEYS`, `CFG_INT_MIN`, `CFG_BOOL_KEYS`, `CFG_STR_KEYS`, `QUANTIZE_ALIASES`), the
optimizer names its trainer accepts, and the defaults (`cfg/default.yaml`) are read from
the installed source with `ast` (literals only; nothing is executed). They follow the
installed version; tests compare them with the imported module's values.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_TABLES = ("CFG_FLOAT_KEYS", "CFG_FRACTION_KEYS", "CFG_INT_KEYS", "CFG_INT_MIN", "CFG_BOOL_KEYS",
           "CFG_STR_KEYS", "QUANTIZE_ALIASES")


class UltralyticsTablesError(RuntimeError):
    """The installed ultralytics does not have the shape these readers expect (an install problem)."""


@dataclass(frozen=True)
class CfgTables:
    defaults: dict[str, Any]
    float_keys: frozenset[str]
    fraction_keys: frozenset[str]
    int_keys: frozenset[str]
    int_min: dict[str, int]
    bool_keys: frozenset[str]
    str_keys: frozenset[str]
    quantize_aliases: dict[str, Any]
    optimizers: frozenset[str]  # as the trainer spells them, "auto" included


def package_root() -> Path:
    found = importlib.util.find_spec("ultralytics")
    if found is None or not found.submodule_search_locations:
        raise UltralyticsTablesError("ultralytics is not installed (reinstall yoloq)")
    return Path(list(found.submodule_search_locations)[0])


@functools.lru_cache(maxsize=1)
def tables() -> CfgTables:
    root = package_root()
    consts = _module_constants(root / "cfg" / "__init__.py", _TABLES)
    return CfgTables(
        defaults=dict(yaml.safe_load((root / "cfg" / "default.yaml").read_text(encoding="utf-8"))),
        float_keys=frozenset(consts["CFG_FLOAT_KEYS"]), fraction_keys=frozenset(consts["CFG_FRACTION_KEYS"]),
        int_keys=frozenset(consts["CFG_INT_KEYS"]), int_min=dict(consts["CFG_INT_MIN"]),
        bool_keys=frozenset(consts["CFG_BOOL_KEYS"]), str_keys=frozenset(consts["CFG_STR_KEYS"]),
        quantize_aliases=dict(consts["QUANTIZE_ALIASES"]),
        optimizers=frozenset(_local_literal(root / "engine" / "trainer.py", "build_optimizer", "optimizers")),
    )


def _module_constants(path: Path, names: tuple[str, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = _assigned_name(node)
        if target in names:
            found[target] = _literal(node.value)  # type: ignore[union-attr]
    missing = [n for n in names if n not in found]
    if missing:
        raise UltralyticsTablesError(f"{path} has no literal {', '.join(missing)}")
    return found


def _local_literal(path: Path, function: str, name: str) -> Any:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for inner in ast.walk(node):
                if _assigned_name(inner) == name:
                    return _literal(inner.value)  # type: ignore[union-attr]
    raise UltralyticsTablesError(f"{path}: no literal `{name}` in {function}()")


def _assigned_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id
    return None


def _literal(value: ast.expr) -> Any:
    """A literal, or frozenset(<literal>) / set(<literal>)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("frozenset", "set") \
            and len(value.args) == 1:
        return set(ast.literal_eval(value.args[0]))
    return ast.literal_eval(value)

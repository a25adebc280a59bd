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
import textwrap
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
    return Path(next(iter(found.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def tables() -> CfgTables:
    root = package_root()
    source = (root / "cfg" / "__init__.py").read_text(encoding="utf-8")
    consts = {name: _literal(_assignment(source, name, root / "cfg" / "__init__.py")) for name in _TABLES}
    trainer = (root / "engine" / "trainer.py").read_text(encoding="utf-8")
    return CfgTables(
        defaults=dict(yaml.load((root / "cfg" / "default.yaml").read_text(encoding="utf-8"), Loader=_YamlLoader)),
        float_keys=frozenset(consts["CFG_FLOAT_KEYS"]), fraction_keys=frozenset(consts["CFG_FRACTION_KEYS"]),
        int_keys=frozenset(consts["CFG_INT_KEYS"]), int_min=dict(consts["CFG_INT_MIN"]),
        bool_keys=frozenset(consts["CFG_BOOL_KEYS"]), str_keys=frozenset(consts["CFG_STR_KEYS"]),
        quantize_aliases=dict(consts["QUANTIZE_ALIASES"]),
        optimizers=frozenset(_literal(_assignment(trainer, "optimizers", root / "engine" / "trainer.py"))),
    )


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader: 1 ms instead of 30


def _assignment(source: str, name: str, path: Path) -> ast.expr:
    """The value of the first `name = ...` statement in `source`, parsed on its own.

    Parsing only that statement (not the whole module) keeps this to a few milliseconds; a
    parse is tried each time the brackets (outside comments) balance.
    """
    begin = _statement_start(source, name)
    if begin < 0:
        raise UltralyticsTablesError(f"{path}: no `{name} = ...`")
    chunk, depth = "", 0
    for line in source[begin:].splitlines(keepends=True)[:400]:
        chunk += line
        code = line.split("#", 1)[0]
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth > 0:
            continue
        try:
            statement = ast.parse(textwrap.dedent(chunk)).body[0]
        except SyntaxError:
            continue
        if isinstance(statement, ast.Assign):
            return statement.value
    raise UltralyticsTablesError(f"{path}: cannot read `{name} = ...`")


def _statement_start(source: str, name: str) -> int:
    """Index of the line holding `name = ...` (the name first on its line), or -1."""
    at = source.find(f"{name} = ")
    while at >= 0:
        line_start = source.rfind("\n", 0, at) + 1
        if not source[line_start:at].strip():
            return line_start
        at = source.find(f"{name} = ", at + 1)
    return -1


def _literal(value: ast.expr) -> Any:
    """A literal, or frozenset(<literal>) / set(<literal>)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("frozenset", "set") \
            and len(value.args) == 1:
        return set(ast.literal_eval(value.args[0]))
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise UltralyticsTablesError(f"not a literal: {ast.unparse(value)[:80]}") from None

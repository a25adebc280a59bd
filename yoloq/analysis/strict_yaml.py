"""YAML and JSON loading that refuses what `yaml.safe_load` lets slip: duplicate keys.

`yaml.safe_load` keeps the last of two equal keys (`epochs: 3` then `epochs: 300` trains
300) and `json.loads` does the same; here both are refused with the two line numbers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml


class DuplicateKey(ValueError):
    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key
        self.first_line = first_line
        self.second_line = second_line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse a key given twice."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # unhashable: SafeLoader reports it below
            continue
        line = key_node.start_mark.line + 1
        if first is not None and key != "<<":
            raise DuplicateKey(key, first, line)
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str) -> Any:
    """Like yaml.safe_load; raises DuplicateKey or yaml.YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)


def load_json(text: str) -> Any:
    """Like json.loads; raises DuplicateKey (with line numbers) or json.JSONDecodeError."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                first, second = _json_key_lines(text, key)
                raise DuplicateKey(key, first, second)
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=pairs)


def _json_key_lines(text: str, key: str) -> tuple[int, int]:
    """Lines of the first two occurrences of `"key":` (0 when it cannot be told)."""
    lines = [text.count("\n", 0, m.start()) + 1
             for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    return (lines + [0, 0])[0], (lines + [0, 0])[1]

"""Plain-text tables that fit the terminal.

Every table the CLI prints goes through `render`. Columns carry a priority (0 is the most
important). To fit the width, the columns that may shrink (free text, given a `min_width`)
shrink, least important first, down to their minimum (a cut cell ends in "…"; a `wrap` column
folds onto more lines instead); when that is not enough, the least important column is dropped
and a note names it. Short values (a state, a tier) are never cut: their column drops whole. An `ident`
column (a job id, a team name: anything a user types back into a command) is never cut nor
dropped. `wide=True` shows every column whole, whatever the width.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MIN_WIDTH = 80  # a terminal narrower than this is taken as 80 (no table is squeezed below it)
ELLIPSIS = "…"
GAP = "  "
EMPTY = "-"  # a missing value (None) is shown as this, never as "None"


@dataclass(frozen=True)
class Column:
    """One column: `key` in the row dicts, shown under `title` (default KEY upper-cased)."""

    key: str
    title: str | None = None
    priority: int = 1  # 0 = most important; the highest number shrinks and drops first
    min_width: int | None = None  # free text may shrink to this; None: shown whole or dropped
    max_width: int | None = None  # a cap on the natural width (not applied with wide=True)
    ident: bool = False  # never cut, never dropped
    wrap: bool = False  # fold a long cell onto more lines instead of cutting it
    right: bool = False  # right-aligned (numbers)
    fmt: Callable[[Any], str] | None = None  # a value's text (default: `cell_text`)

    @property
    def heading(self) -> str:
        return self.title if self.title is not None else self.key.upper()


def terminal_width() -> int:
    """`COLUMNS` when it is a number, else the terminal's width; never under MIN_WIDTH."""
    raw = os.environ.get("COLUMNS", "").strip()
    width = int(raw) if raw.isdigit() else shutil.get_terminal_size((MIN_WIDTH, 24)).columns
    return max(MIN_WIDTH, width)


def cell_text(value: Any) -> str:
    """A value as a table shows it: None as "-", a datetime to the second, one line."""
    if value is None:
        return EMPTY
    if isinstance(value, datetime):
        return short_time(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return "".join(c if c.isprintable() else " " for c in text)


def short_time(value: Any, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A datetime or ISO time as `YYYY-MM-DD HH:MM:SS` (the zone is dropped: Prefect's are UTC)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.strftime(pattern)
    return cell_text(value)


def day_time(value: Any) -> str:
    """`MM-DD HH:MM:SS`: for logs read over days, where the year only costs width."""
    return short_time(value, "%m-%d %H:%M:%S")


def render(rows: Sequence[dict[str, Any]], columns: Sequence[Column], width: int | None = None,
           wide: bool = False, empty: str = "(none)") -> str:
    """The rows as a table within `width` (default: `terminal_width()`), or whole with `wide`."""
    if not rows:
        return empty
    texts = [{c.key: (c.fmt or cell_text)(row.get(c.key)) for c in columns} for row in rows]
    natural = {c.key: max(len(c.heading), *(len(t[c.key]) for t in texts)) for c in columns}
    if wide:
        return _draw(texts, list(columns), natural, [], 0)
    capped = {c.key: min(natural[c.key], c.max_width) if c.max_width and not c.ident else natural[c.key]
              for c in columns}
    shown, dropped = list(columns), []
    limit = width if width is not None else terminal_width()
    while True:
        widths = _fit(shown, capped, limit)
        droppable = [c for c in shown if not c.ident]
        if widths is not None or not droppable:
            break
        victim = max(droppable, key=lambda c: (c.priority, shown.index(c)))
        shown.remove(victim)
        dropped.append(victim)
    if widths is None:  # only ids are left and they are wider than the terminal: shown whole
        widths = {c.key: capped[c.key] for c in shown}
    return _draw(texts, shown, widths, dropped, limit)


def _fit(shown: list[Column], natural: dict[str, int], limit: int) -> dict[str, int] | None:
    """Widths for `shown` within `limit`, shrinking the least important columns first; None
    when even their minimums do not fit."""
    widths = {c.key: natural[c.key] for c in shown}
    excess = sum(widths.values()) + len(GAP) * (len(shown) - 1) - limit
    for col in sorted((c for c in shown if not c.ident and c.min_width is not None), key=lambda c: -c.priority):
        if excess <= 0:
            break
        give = min(excess, max(0, widths[col.key] - (col.min_width or 0)))
        widths[col.key] -= give
        excess -= give
    return widths if excess <= 0 else None


def _draw(texts: list[dict[str, str]], shown: list[Column], widths: dict[str, int],
          dropped: list[Column], limit: int) -> str:
    lines = [_line([_cut(c.heading, widths[c.key]) for c in shown], shown, widths)]
    for text in texts:
        cells = [_cell_lines(text[c.key], c, widths[c.key]) for c in shown]
        for i in range(max(len(cell) for cell in cells)):
            lines.append(_line([cell[i] if i < len(cell) else "" for cell in cells], shown, widths))
    if dropped:
        note = f"({', '.join(c.heading for c in dropped)} hidden to fit; --wide shows all)"
        lines.append(note if len(note) <= limit else f"({len(dropped)} columns hidden to fit; --wide shows all)")
    return "\n".join(lines)


def _cell_lines(text: str, col: Column, width: int) -> list[str]:
    if len(text) <= width or col.ident:
        return [text]
    if col.wrap:  # a word longer than the column (an id) stays whole on its own line
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]
    return [_cut(text, width)]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(0, width - 1)] + ELLIPSIS


def _line(cells: list[str], shown: list[Column], widths: dict[str, int]) -> str:
    parts = [cell.rjust(widths[c.key]) if c.right else cell.ljust(widths[c.key]) for cell, c in zip(cells, shown)]
    return GAP.join(parts).rstrip()

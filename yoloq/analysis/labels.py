"""YOLO label files: parse and check them, the way ultralytics' verify_image_label would reject them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from yoloq.base.errors import DatasetError

_COORD_SLACK = 0.01  # ultralytics accepts coordinates in [-0.01, 1.01] and clips them


@dataclass(frozen=True)
class LabelScan:
    checked: int  # image files whose label file was looked for
    labelled: int  # of those, how many had a label file
    boxes: int


def sample(items: list[str], limit: int) -> list[str]:
    """All items up to `limit`, else an evenly spaced, deterministic sample of `limit`."""
    if len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def scan_labels(images: list[str], label_of, nc: int, root: Path) -> LabelScan:
    """Check the label file of each image; raise DatasetError on the first bad row."""
    labelled = boxes = 0
    for image in images:
        label = label_of(image)
        try:
            text = label.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(_where(label, root), f"cannot read label file: {exc}",
                               "write UTF-8 text rows `cls cx cy w h`") from None
        labelled += 1
        boxes += check_label_text(text, nc, _where(label, root))
    return LabelScan(checked=len(images), labelled=labelled, boxes=boxes)


def check_label_text(text: str, nc: int, where: str) -> int:
    """Validate one label file's rows; return the number of objects."""
    rows = [(n, line.split()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    kinds = set()
    for number, cols in rows:
        kinds.add(_check_row(cols, nc, f"{where}:{number}"))
    if len(kinds) > 1:
        raise DatasetError(where, "mixes box rows (5 columns) and polygon rows",
                           "use one format per file: `cls cx cy w h` rows or `cls x1 y1 x2 y2 ...` rows")
    return len(rows)


def _check_row(cols: list[str], nc: int, where: str) -> str:
    if len(cols) != 5 and (len(cols) < 7 or len(cols) % 2 == 0):
        raise DatasetError(where, f"{len(cols)} columns, expected 5 (cls cx cy w h)",
                           "write one object per line as `cls cx cy w h`")
    try:
        values = [float(c) for c in cols]
        if not all(math.isfinite(v) for v in values):
            raise ValueError
    except ValueError:
        bad = next(c for c in cols if not _is_number(c))
        raise DatasetError(where, f"non-numeric value {bad!r}",
                           "write numbers only: `cls cx cy w h`") from None
    cls = values[0]
    if cls != int(cls) or cls < 0:
        raise DatasetError(where, f"class id {cols[0]} is not a non-negative integer",
                           f"use class ids 0-{nc - 1}")
    if cls >= nc:
        raise DatasetError(where, f"class id {int(cls)} >= nc {nc}",
                           f"use class ids 0-{nc - 1}, or add names to the data YAML")
    coords = values[1:]
    low, high = min(coords), max(coords)
    if low < -_COORD_SLACK or high > 1 + _COORD_SLACK:
        value = low if low < -_COORD_SLACK else high
        raise DatasetError(where, f"coordinate {value:g} outside [0, 1]",
                           "normalise coordinates by the image width and height")
    if len(cols) == 5 and min(coords[2:]) < 0:
        raise DatasetError(where, "negative box width or height", "write `cls cx cy w h` with w, h > 0")
    return "box" if len(cols) == 5 else "polygon"


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _where(label: Path, root: Path) -> str:
    try:
        return str(label.relative_to(root))
    except ValueError:
        return str(label)

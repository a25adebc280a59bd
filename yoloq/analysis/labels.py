"""YOLO label files: parse and check them, the way ultralytics' verify_image_label would reject them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class LabelFormat:
    """The rows a dataset's label files must hold for the model's task (`label_format` in
    `yoloq.analysis.dataset` reads it from the task and the data YAML)."""

    task: str = "detect"
    keypoints: int = 0  # pose: K from `kpt_shape: [K, dims]`
    dims: int = 0  # pose: 2 (x y) or 3 (x y visibility)
    masks_dir: str = ""  # semantic: the folder of mask PNGs ("": polygon rows in labels/)
    label_mapping: tuple[tuple[Any, Any], ...] = ()  # semantic: raw mask id -> class id, from the YAML
    depth_scale: Any = None  # depth: PNG value per metre

    @property
    def labels_folder(self) -> str:
        """The folder that mirrors images/ with this task's labels."""
        return "depth" if self.task == "depth" else self.masks_dir or "labels"

    @property
    def pose_columns(self) -> int:
        return 5 + self.keypoints * self.dims


def scan_labels(images: list[str], label_of, nc: int, root: Path,
                fmt: LabelFormat = LabelFormat()) -> LabelScan:
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
        boxes += check_label_text(text, nc, _where(label, root), fmt)
    return LabelScan(checked=len(images), labelled=labelled, boxes=boxes)


def check_label_text(text: str, nc: int, where: str, fmt: LabelFormat = LabelFormat()) -> int:
    """Validate one label file's rows; return the number of objects."""
    rows = [(n, line.split()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    kinds = set()
    for number, cols in rows:
        kinds.add(_check_row(cols, nc, f"{where}:{number}", fmt))
    if len(kinds) > 1:
        raise DatasetError(where, "mixes box rows (5 columns) and polygon rows (ultralytics then drops "
                           "every polygon of the dataset and trains boxes only)",
                           "use one format per file: `cls cx cy w h` rows or `cls x1 y1 x2 y2 ...` rows")
    return len(rows)


def _check_shape(cols: list[str], where: str, fmt: LabelFormat) -> str:
    """The row's kind for the task, or DatasetError naming the columns expected."""
    n = len(cols)
    polygon = n >= 7 and n % 2 == 1
    if fmt.task in ("segment", "semantic"):  # semantic without masks_dir: ultralytics rasterises polygons
        if n == 5:
            raise DatasetError(where, f"a box row (5 columns) in the dataset of a {fmt.task} model: "
                               "segmentation trains masks from polygons",
                               "write `cls x1 y1 x2 y2 ... xn yn` (a polygon of at least 3 points), or "
                               + ("train a detect model" if fmt.task == "segment"
                                  else "give mask PNGs and `masks_dir` in the data YAML"))
        if not polygon:
            raise DatasetError(where, f"{n} columns, expected a polygon: the class and an even number "
                               ">= 6 of coordinates", "write `cls x1 y1 x2 y2 ... xn yn` (n >= 3)")
        return "polygon"
    if fmt.task == "pose":
        if n != fmt.pose_columns:
            raise DatasetError(where, f"{n} columns, expected {fmt.pose_columns} (cls cx cy w h and "
                               f"{fmt.keypoints} keypoints of {fmt.dims} values, from kpt_shape)",
                               "write `cls cx cy w h` then x y" + (" v" if fmt.dims == 3 else "")
                               + " for every keypoint, or fix kpt_shape in the data YAML")
        return "pose"
    if fmt.task == "obb":
        if n != 9:
            hint = " (a DOTA row `x1 y1 ... x4 y4 name difficulty` must be converted first: " \
                   "ultralytics.data.converter.convert_dota_to_yolo_obb)" if n == 10 else ""
            raise DatasetError(where, f"{n} columns, expected 9 (cls and the 4 corners x1 y1 ... x4 y4){hint}",
                               "write `cls x1 y1 x2 y2 x3 y3 x4 y4`, normalised")
        return "obb"
    if n != 5 and not polygon:
        raise DatasetError(where, f"{n} columns, expected 5 (cls cx cy w h)",
                           "write one object per line as `cls cx cy w h`")
    return "box" if n == 5 else "polygon"


def _check_row(cols: list[str], nc: int, where: str, fmt: LabelFormat = LabelFormat()) -> str:
    kind = _check_shape(cols, where, fmt)
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
    if kind == "pose":  # the box, then each keypoint's x y (a visibility flag is no coordinate)
        points = values[5:]
        coords = values[1:5] + [v for i, v in enumerate(points) if fmt.dims == 2 or i % 3 != 2]
    low, high = min(coords), max(coords)
    if low < -_COORD_SLACK or high > 1 + _COORD_SLACK:
        value = low if low < -_COORD_SLACK else high
        raise DatasetError(where, f"coordinate {value:g} outside [0, 1]",
                           "normalise coordinates by the image width and height")
    if kind in ("box", "pose") and min(values[3:5]) < 0:
        raise DatasetError(where, "negative box width or height", "write `cls cx cy w h` with w, h > 0")
    return kind


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

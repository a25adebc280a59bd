"""A small, real, learnable dataset: coloured shapes on noisy backgrounds, for every task
yoloq trains.

Each class is a shape (rectangle, ellipse, triangle, ...) drawn in its own hue,
so a few epochs of a nano model learn it. The task decides the label rows:

- detect: the shape's box (`cls cx cy w h`);
- segment: the shape's outline as a polygon (`cls x1 y1 ... xn yn`);
- pose: the box and its four corners as keypoints (`kpt_shape: [4, 3]`, all visible);
- obb: the shape drawn rotated, and the four corners of its rotated box;
- classify: one shape per image, in a folder named after its class
  (`train/<class>/*.png`, `val/<class>/*.png`; the dataset is the folder, no YAML);
- semantic: a mask PNG per image (`masks/<split>/`, `masks_dir: masks`), each pixel its
  class id, the background the last class (`background`), as ultralytics' own polygon form has it;
- depth: a 16-bit depth PNG per image (`depth/<split>/`, millimetres, `depth_scale: 1000`):
  a background receding from 6 m at the top to 3 m at the bottom, each shape flat at 1-2.5 m.

PIL and numpy only (no torch), and deterministic: image `i` of a split depends only
on (seed, split, i). Detect, segment and pose draw the same images for one seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from PIL import Image, ImageDraw

from yoloq.domain.tasks import TRAINED_TASKS

SHAPES = ("rectangle", "ellipse", "triangle", "diamond", "cross", "hexagon", "star", "ring")
# One clearly different hue per class (RGB), jittered per object.
_COLOURS = ((220, 40, 40), (40, 170, 60), (50, 80, 230), (230, 200, 30),
            (200, 50, 200), (30, 200, 210), (240, 130, 20), (240, 240, 240))
_SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
# Pose: the box's corners, clockwise from top-left; a horizontal flip swaps left and right.
POSE_KPT_SHAPE = (4, 3)
POSE_FLIP_IDX = (1, 0, 3, 2)
DEPTH_SCALE = 1000  # depth PNG value per metre (ultralytics' default)
_ELLIPSE_POINTS = 16


@dataclass(frozen=True)
class Box:
    cls: int
    x0: float
    y0: float
    x1: float
    y1: float

    def yolo_line(self, size: int) -> str:
        cx, cy = (self.x0 + self.x1) / 2 / size, (self.y0 + self.y1) / 2 / size
        w, h = (self.x1 - self.x0) / size, (self.y1 - self.y0) / size
        return f"{self.cls} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}"

    def corners(self) -> list[tuple[float, float]]:
        """Clockwise from top-left, in pixels."""
        return [(self.x0, self.y0), (self.x1, self.y0), (self.x1, self.y1), (self.x0, self.y1)]

    def label_line(self, size: int, task: str) -> str:
        if task == "segment":
            return f"{self.cls} {_points(shape_polygon(self), size)}"
        if task == "pose":
            keypoints = " ".join(f"{x / size:.6f} {y / size:.6f} 2" for x, y in self.corners())
            return f"{self.yolo_line(size)} {keypoints}"
        return self.yolo_line(size)


@dataclass(frozen=True)
class RotatedBox:
    """An oriented box: centre, side lengths and angle (radians), in pixels."""

    cls: int
    cx: float
    cy: float
    w: float
    h: float
    angle: float

    def corners(self) -> list[tuple[float, float]]:
        return self.transform([(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)])

    def transform(self, unit: list[tuple[float, float]]) -> list[tuple[float, float]]:
        """Points of the unit square [0, 1]^2 placed on this box."""
        cos, sin = np.cos(self.angle), np.sin(self.angle)
        placed = []
        for u, v in unit:
            dx, dy = (u - 0.5) * self.w, (v - 0.5) * self.h
            placed.append((self.cx + dx * cos - dy * sin, self.cy + dx * sin + dy * cos))
        return placed

    def bounds(self) -> Box:
        xs, ys = zip(*self.corners())
        return Box(self.cls, min(xs), min(ys), max(xs), max(ys))

    def label_line(self, size: int, task: str = "obb") -> str:
        return f"{self.cls} {_points(self.corners(), size)}"


def _points(points: list[tuple[float, float]], size: int) -> str:
    return " ".join(f"{min(max(x / size, 0.0), 1.0):.6f} {min(max(y / size, 0.0), 1.0):.6f}" for x, y in points)


def synth_dataset(directory: str | Path, train: int = 16, val: int = 8, imgsz: int = 64,
                  nc: int = 3, seed: int = 0, relative_path: bool = False, task: str = "detect") -> Path:
    """Write `images/{train,val}`, `labels/{train,val}` and `data.yaml`; return the YAML path
    (classify: `{train,val}/<class>/` and the folder itself, which is the dataset).

    `relative_path=True` writes `path: .` (resolved from the YAML's folder by yoloq);
    the default writes the absolute dataset folder, which ultralytics also reads as is.
    """
    if not 1 <= nc <= len(SHAPES):
        raise ValueError(f"nc must be between 1 and {len(SHAPES)}")
    if imgsz < 16 or train < 1 or val < 1:
        raise ValueError("need imgsz >= 16 and at least one train and one val image")
    if task not in TRAINED_TASKS:
        raise ValueError(f"task must be one of {', '.join(TRAINED_TASKS)}, not {task!r}")
    root = Path(directory).expanduser().resolve()
    if task == "classify":
        for split, count in (("train", train), ("val", val)):
            _write_class_folders(root, split, count, imgsz, nc, seed)
        return root
    for split, count in (("train", train), ("val", val)):
        _write_split(root, split, count, imgsz, nc, seed, task)
    data = {"path": "." if relative_path else str(root), "train": "images/train",
            "val": "images/val", "nc": nc, "names": list(SHAPES[:nc])}
    if task == "pose":
        data.update(kpt_shape=list(POSE_KPT_SHAPE), flip_idx=list(POSE_FLIP_IDX))
    if task == "semantic":
        data.update(masks_dir="masks", nc=nc + 1, names=[*SHAPES[:nc], "background"])
    if task == "depth":
        data.update(nc=1, names=["depth"], depth_scale=DEPTH_SCALE)
    data_yaml = root / "data.yaml"
    data_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    return data_yaml


def _write_split(root: Path, split: str, count: int, imgsz: int, nc: int, seed: int, task: str) -> None:
    targets = {"semantic": "masks", "depth": "depth"}.get(task, "labels")  # ultralytics' mirror of images/
    images, labels = root / "images" / split, root / targets / split
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
        image, objects = render_rotated(rng, imgsz, nc) if task == "obb" else render_image(rng, imgsz, nc)
        stem = f"{split}_{index:05d}"
        image.save(images / f"{stem}.png", optimize=False)
        if task == "semantic":
            semantic_mask(objects, imgsz, background=nc).save(labels / f"{stem}.png", optimize=False)
        elif task == "depth":
            depth_rng = np.random.default_rng([seed, _SPLIT_IDS[split], index, 1])  # the image stays detect's
            depth_map(objects, imgsz, depth_rng).save(labels / f"{stem}.png", optimize=False)
        else:
            (labels / f"{stem}.txt").write_text("".join(o.label_line(imgsz, task) + "\n" for o in objects))


def semantic_mask(boxes: list[Box], size: int, background: int) -> Image.Image:
    """Each pixel the class id of the shape drawn there (exactly the image's pixels), else `background`."""
    mask = Image.new("L", (size, size), background)
    draw = ImageDraw.Draw(mask)
    for box in boxes:
        _draw_shape(draw, box, box.cls)
    return mask


def depth_map(boxes: list[Box], size: int, rng: np.random.Generator) -> Image.Image:
    """Millimetres (uint16): the background from 6 m (top row) to 3 m (bottom), each shape flat."""
    rows = np.linspace(6000, 3000, size, dtype=np.float64)[:, None].repeat(size, axis=1)
    depth = Image.fromarray(rows.astype(np.int32), "I")
    draw = ImageDraw.Draw(depth)
    for box in boxes:
        _draw_shape(draw, box, int(rng.uniform(1000, 2500)))
    return Image.fromarray(np.asarray(depth).astype(np.uint16))


def _write_class_folders(root: Path, split: str, count: int, imgsz: int, nc: int, seed: int) -> None:
    """Image `i` shows one shape of class `i % nc`, so every class has images in every split
    with at least nc images."""
    for name in SHAPES[:nc]:
        (root / split / name).mkdir(parents=True, exist_ok=True)
    for index in range(count):
        rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
        cls = index % nc
        image = _background(rng, imgsz)
        box = None
        while box is None:
            box = _place(rng, imgsz, cls, [])
        _draw_shape(ImageDraw.Draw(image), box, _colour(rng, cls))
        image.save(root / split / SHAPES[cls] / f"{split}_{index:05d}.png", optimize=False)


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    base = rng.integers(60, 140, size=3)
    noise = rng.normal(0, 18, size=(size, size, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


def render_image(rng: np.random.Generator, size: int, nc: int) -> tuple[Image.Image, list[Box]]:
    """One noisy background with 1-3 non-overlapping shapes."""
    return _render(rng, size, nc, _place, _draw_shape)


def render_rotated(rng: np.random.Generator, size: int, nc: int) -> tuple[Image.Image, list[RotatedBox]]:
    """One noisy background with 1-3 shapes, each rotated, none overlapping another's bounds."""
    return _render(rng, size, nc, _place_rotated, _draw_rotated)


def _render(rng: np.random.Generator, size: int, nc: int, place: Callable[..., Any],
            draw_one: Callable[..., None]) -> tuple[Image.Image, list[Any]]:
    image = _background(rng, size)
    draw = ImageDraw.Draw(image)
    objects: list[Any] = []
    for _ in range(int(rng.integers(1, 4))):
        placed = place(rng, size, int(rng.integers(0, nc)), objects)
        if placed is not None:
            draw_one(draw, placed, _colour(rng, placed.cls))
            objects.append(placed)
    return image, objects


def _draw_rotated(draw: ImageDraw.ImageDraw, box: RotatedBox, colour: tuple[int, int, int]) -> None:
    draw.polygon(box.transform(_unit_outline(SHAPES[box.cls])), fill=colour)


def _place_rotated(rng: np.random.Generator, size: int, cls: int,
                   taken: list[RotatedBox]) -> RotatedBox | None:
    for _ in range(20):
        w, h = rng.uniform(0.3, 0.5, size=2) * size
        w, h = max(w, h), min(w, h) * 0.6  # elongated, so that the angle is learnable
        box = RotatedBox(cls, float(rng.uniform(0, size)), float(rng.uniform(0, size)), float(w), float(h),
                         float(rng.uniform(0, np.pi)))
        bounds = box.bounds()
        inside = bounds.x0 >= 0 and bounds.y0 >= 0 and bounds.x1 <= size - 1 and bounds.y1 <= size - 1
        if inside and not any(_overlaps(bounds, other.bounds()) for other in taken):
            return box
    return None


def _unit_outline(shape: str) -> list[tuple[float, float]]:
    """The shape's outline in the unit square, touching all four sides (a ring is its outer edge)."""
    if shape in ("ellipse", "ring"):
        turns = np.linspace(0, 2 * np.pi, _ELLIPSE_POINTS, endpoint=False)
        return [(0.5 + 0.5 * float(np.cos(t)), 0.5 + 0.5 * float(np.sin(t))) for t in turns]
    outlines = {
        "rectangle": [(0, 0), (1, 0), (1, 1), (0, 1)],
        "triangle": [(0.5, 0), (1, 1), (0, 1)],
        "diamond": [(0.5, 0), (1, 0.5), (0.5, 1), (0, 0.5)],
        "cross": [(1 / 3, 0), (2 / 3, 0), (2 / 3, 1 / 3), (1, 1 / 3), (1, 2 / 3), (2 / 3, 2 / 3), (2 / 3, 1),
                  (1 / 3, 1), (1 / 3, 2 / 3), (0, 2 / 3), (0, 1 / 3), (1 / 3, 1 / 3)],
        "hexagon": [(0.25, 0), (0.75, 0), (1, 0.5), (0.75, 1), (0.25, 1), (0, 0.5)],
        "star": [(0.5, 0), (1, 1), (0, 0.5), (1, 0.5), (0, 1)],
    }
    return [(float(u), float(v)) for u, v in outlines[shape]]


def shape_polygon(box: Box) -> list[tuple[float, float]]:
    """The outline of the shape `_draw_shape` draws in `box`, in pixels (a segmentation label)."""
    x0, y0, x1, y1 = box.x0, box.y0, box.x1 - 1, box.y1 - 1
    return [(x0 + u * (x1 - x0), y0 + v * (y1 - y0)) for u, v in _unit_outline(SHAPES[box.cls])]


def _place(rng: np.random.Generator, size: int, cls: int, taken: list[Box]) -> Box | None:
    for _ in range(20):
        w, h = (rng.uniform(0.25, 0.5, size=2) * size).round()
        x0, y0 = rng.uniform(0, size - w), rng.uniform(0, size - h)
        box = Box(cls, float(round(x0)), float(round(y0)), float(round(x0) + w), float(round(y0) + h))
        if not any(_overlaps(box, other) for other in taken):
            return box
    return None


def _overlaps(a: Box, b: Box) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _colour(rng: np.random.Generator, cls: int) -> tuple[int, int, int]:
    jitter = rng.integers(-25, 26, size=3)
    return tuple(int(c) for c in np.clip(np.array(_COLOURS[cls]) + jitter, 0, 255))  # type: ignore[return-value]


def _draw_shape(draw: ImageDraw.ImageDraw, box: Box, colour: tuple[int, int, int]) -> None:
    """Draw the class's shape so that it touches all four sides of its box."""
    x0, y0, x1, y1 = box.x0, box.y0, box.x1 - 1, box.y1 - 1
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    shape = SHAPES[box.cls]
    if shape == "rectangle":
        draw.rectangle((x0, y0, x1, y1), fill=colour)
    elif shape == "ellipse":
        draw.ellipse((x0, y0, x1, y1), fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=colour)
    elif shape == "cross":
        tw, th = (x1 - x0) / 6, (y1 - y0) / 6
        draw.rectangle((cx - tw, y0, cx + tw, y1), fill=colour)
        draw.rectangle((x0, cy - th, x1, cy + th), fill=colour)
    elif shape == "hexagon":
        qx = (x1 - x0) / 4
        draw.polygon([(x0 + qx, y0), (x1 - qx, y0), (x1, cy), (x1 - qx, y1), (x0 + qx, y1), (x0, cy)],
                     fill=colour)
    elif shape == "star":
        draw.polygon([(cx, y0), (x1, y1), (x0, cy), (x1, cy), (x0, y1)], fill=colour)
    else:  # ring
        draw.ellipse((x0, y0, x1, y1), outline=colour, width=max(2, int((x1 - x0) / 6)))

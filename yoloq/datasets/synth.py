"""A small, real, learnable detection dataset: coloured shapes on noisy backgrounds.

Each class is a shape (rectangle, ellipse, triangle, ...) drawn in its own hue,
so a few epochs of a nano model learn it. PIL and numpy only (no torch), and
deterministic: image `i` of a split depends only on (seed, split, i).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from PIL import Image, ImageDraw

SHAPES = ("rectangle", "ellipse", "triangle", "diamond", "cross", "hexagon", "star", "ring")
# One clearly different hue per class (RGB), jittered per object.
_COLOURS = ((220, 40, 40), (40, 170, 60), (50, 80, 230), (230, 200, 30),
            (200, 50, 200), (30, 200, 210), (240, 130, 20), (240, 240, 240))
_SPLIT_IDS = {"train": 0, "val": 1, "test": 2}


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


def synth_dataset(directory: str | Path, train: int = 16, val: int = 8, imgsz: int = 64,
                  nc: int = 3, seed: int = 0, relative_path: bool = False) -> Path:
    """Write `images/{train,val}`, `labels/{train,val}` and `data.yaml`; return the YAML path.

    `relative_path=True` writes `path: .` (resolved from the YAML's folder by yoloq);
    the default writes the absolute dataset folder, which ultralytics also reads as is.
    """
    if not 1 <= nc <= len(SHAPES):
        raise ValueError(f"nc must be between 1 and {len(SHAPES)}")
    if imgsz < 16 or train < 1 or val < 1:
        raise ValueError("need imgsz >= 16 and at least one train and one val image")
    root = Path(directory).expanduser().resolve()
    for split, count in (("train", train), ("val", val)):
        _write_split(root, split, count, imgsz, nc, seed)
    data = {"path": "." if relative_path else str(root), "train": "images/train",
            "val": "images/val", "nc": nc, "names": list(SHAPES[:nc])}
    data_yaml = root / "data.yaml"
    data_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    return data_yaml


def _write_split(root: Path, split: str, count: int, imgsz: int, nc: int, seed: int) -> None:
    images, labels = root / "images" / split, root / "labels" / split
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
        image, boxes = render_image(rng, imgsz, nc)
        stem = f"{split}_{index:05d}"
        image.save(images / f"{stem}.png", optimize=False)
        (labels / f"{stem}.txt").write_text("".join(b.yolo_line(imgsz) + "\n" for b in boxes))


def render_image(rng: np.random.Generator, size: int, nc: int) -> tuple[Image.Image, list[Box]]:
    """One noisy background with 1-3 non-overlapping shapes."""
    base = rng.integers(60, 140, size=3)
    noise = rng.normal(0, 18, size=(size, size, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    boxes: list[Box] = []
    for _ in range(int(rng.integers(1, 4))):
        box = _place(rng, size, int(rng.integers(0, nc)), boxes)
        if box is not None:
            _draw_shape(draw, box, _colour(rng, box.cls))
            boxes.append(box)
    return image, boxes


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

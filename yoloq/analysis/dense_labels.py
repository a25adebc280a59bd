"""Checks of per-pixel labels: semantic masks and depth maps, as ultralytics' `verify_image_mask`
and `verify_image_depth` read them, without ultralytics.

ultralytics drops an image whose mask or depth map is unusable (a warning in its log, the image
left out of training); admission names the file instead, since a user who wrote it meant it to
train. An image with no mask or depth file at all is left out by ultralytics too: a warning
here, and a refusal when no training image has one.

- semantic, `masks_dir: <dir>` in the data YAML: `<dir>/` mirrors `images/` (the last `images`
  folder of the path replaced), one PNG per image; each pixel a class id below `nc` or 255
  (ignored), after the YAML's `label_mapping` (raw id -> class id or `ignore_label`); the mask's
  size is the image's.
- depth: `depth/` mirrors `images/`, a 16-bit (or 32-bit integer) grayscale PNG in units of
  `1/depth_scale` metres, or a 2-D floating-point `.npy` in metres; the same aspect ratio as the
  image within 2%.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from yoloq.analysis.dataset_files import IMG_FORMATS
from yoloq.analysis.labels import LabelScan
from yoloq.base.errors import DatasetError

IGNORE = 255  # ultralytics' ignore label in masks
ASPECT_TOLERANCE = 0.02  # |log(aspect ratio of depth / of image)|, as verify_image_depth


def mirror(image: str, folder: str, suffix: str) -> Path:
    """ultralytics' img2label_paths: the last /images/ becomes /<folder>/, the suffix `suffix`."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}{folder}{os.sep}"
    return Path(sb.join(image.rsplit(sa, 1)).rsplit(".", 1)[0] + suffix)


def mask_lookup(data: dict[str, Any], nc: int) -> np.ndarray:
    """256 entries, True where a raw mask id is neither a class (after `label_mapping`) nor 255."""
    mapping = data.get("label_mapping") or {}
    if not isinstance(mapping, dict):
        raise DatasetError("data.label_mapping", f"must be a mapping of raw mask ids to class ids, not "
                           f"{type(mapping).__name__}", "write `label_mapping: {7: 0, 8: 1, 0: ignore_label}`")
    forward = np.arange(256)
    for raw, target in mapping.items():
        try:
            source = int(raw)
            value = IGNORE if target is None or str(target).strip() == "ignore_label" else int(target)
        except (TypeError, ValueError):
            raise DatasetError("data.label_mapping", f"{raw!r}: {target!r} is not an id mapped to a class id or "
                               "ignore_label", "map each raw id to a class id 0..nc-1 or to ignore_label") from None
        if 0 <= source < 256:
            forward[source] = value
    return (forward >= nc) & (forward != IGNORE)


def scan_masks(images: list[str], masks_dir: str, invalid: np.ndarray, nc: int, root: Path) -> LabelScan:
    """Open each image's mask; raise DatasetError on the first that would not train."""
    labelled = 0
    for image in images:
        mask_file = _existing(mirror(image, masks_dir, ".png"))
        if mask_file is None:
            continue
        labelled += 1
        where = _where(mask_file, root)
        mask = _read_mask(mask_file, where)
        size = _image_size(image)
        if mask.shape[:2] != (size[1], size[0]):
            raise DatasetError(where, f"mask is {mask.shape[1]}x{mask.shape[0]} px, its image "
                               f"{size[0]}x{size[1]}", "write each mask at its image's size")
        if mask.max(initial=0) > 255 or invalid[mask].any():
            bad = sorted({int(v) for v in np.unique(mask) if v > 255 or invalid[v]})
            raise DatasetError(where, f"mask ids {bad[:8]} are not class ids (0-{nc - 1}) or 255 (ignored)",
                               "write each pixel's class id, 255 where it should not count; or map raw ids "
                               "with label_mapping in the data YAML")
    return LabelScan(checked=len(images), labelled=labelled, boxes=0)


def scan_depth(images: list[str], scale: Any, root: Path) -> LabelScan:
    """Open each image's depth map; raise DatasetError on the first that would not train."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise DatasetError("data.depth_scale", f"{scale!r} is not a positive number",
                           "give the PNG value of one metre, e.g. depth_scale: 1000 (millimetres)")
    labelled = 0
    for image in images:
        png = mirror(image, "depth", ".png")
        depth_file = png if png.is_file() else png.with_suffix(".npy")
        if not depth_file.is_file():
            continue
        labelled += 1
        where = _where(depth_file, root)
        height, width = _depth_shape(depth_file, where)
        image_w, image_h = _image_size(image)
        if abs(math.log((width / height) / (image_w / image_h))) > ASPECT_TOLERANCE:
            raise DatasetError(where, f"depth map is {width}x{height} px, its image {image_w}x{image_h}: "
                               "another shape", "write each depth map at its image's size")
    return LabelScan(checked=len(images), labelled=labelled, boxes=0)


def _existing(mask: Path) -> Path | None:
    """The mask, or one of the same stem with another image suffix (as ultralytics looks)."""
    if mask.is_file():
        return mask
    return next((mask.with_suffix(f".{ext}") for ext in sorted(IMG_FORMATS)
                 if mask.with_suffix(f".{ext}").is_file()), None)


def _read_mask(path: Path, where: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            if im.mode == "P":  # a palette: class ids are the indices (a grey palette: the grey levels)
                palette = np.array(im.getpalette()).reshape(-1, 3)
                return np.array(im.convert("L") if (palette == palette[:, :1]).all() else im)
            if im.mode not in ("L", "1", "I", "I;16"):
                raise DatasetError(where, f"mask is a {im.mode} image, not one channel of class ids",
                                   "write a single-channel (L) PNG whose pixels are class ids")
            mask = np.array(im)
            return mask.astype(np.uint8) if im.mode == "1" else mask
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 (any decoder failure; ultralytics may patch Image.open)
        raise DatasetError(where, f"mask does not decode ({type(exc).__name__})", "replace the file") from None


def _depth_shape(path: Path, where: str) -> tuple[int, int]:
    if path.suffix == ".npy":
        try:
            depth = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DatasetError(where, f"cannot read the .npy depth map ({exc})", "replace the file") from None
        if depth.ndim != 2 or depth.dtype.kind != "f":
            raise DatasetError(where, f"a {depth.ndim}-D {depth.dtype} array; a .npy depth map is 2-D floating "
                               "point, in metres", "save it as float32 (H, W)")
        return int(depth.shape[0]), int(depth.shape[1])
    from PIL import Image

    try:
        with Image.open(path) as im:
            if im.format != "PNG" or im.mode not in ("I", "I;16"):
                raise DatasetError(where, f"a {im.format} {im.mode} image; a depth PNG is 16-bit grayscale",
                                   "write uint16 PNGs (value = metres x depth_scale) or float .npy files")
            im.verify()
            return im.height, im.width
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 (any decoder failure; ultralytics may patch Image.open)
        raise DatasetError(where, f"depth map does not decode ({type(exc).__name__})", "replace the file") from None


def _image_size(image: str) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(image) as im:
            return im.size
    except Exception as exc:  # noqa: BLE001 (any decoder failure; ultralytics may patch Image.open)
        raise DatasetError("data", f"{image} does not decode as an image ({type(exc).__name__})",
                           "replace or remove the file") from None


def _where(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)

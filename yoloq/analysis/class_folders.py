"""Validation of a classification dataset: a folder of class folders, as ultralytics'
`check_cls_dataset` and `ClassificationDataset` read it, without ultralytics.

    data/train/<class>/*.jpg     the classes are train's subfolders, sorted by name
    data/val/<class>/*.jpg       or validation/, valid/; test/ when there is no val

Where ultralytics would change the user's files or guess, admission refuses instead:
a folder with no `train/` (ultralytics splits it in place, 80/20), no `val/` or `test/`.
A val class that train lacks is dropped by ultralytics (its ImageFolder scan is aligned to
train's names): a warning. Images are opened and verified as ultralytics' `verify_image`
does (decodes, at least 10 px a side); the first one that does not is named.
"""

from __future__ import annotations

import os
from pathlib import Path

from yoloq.analysis.dataset_files import (IMG_FORMATS, LABEL_SCAN_LIMIT, DatasetInfo, SplitInfo, no_loop,
                                          resolved_path, walk_files)
from yoloq.analysis.labels import sample
from yoloq.base.errors import DatasetError

VAL_FOLDERS = ("val", "validation", "valid")  # ultralytics' order
MIN_SIDE = 10  # ultralytics.data.utils.verify_image: "image size <10 pixels"


def is_class_folder_dataset(data: str | Path) -> bool:
    """A local folder (not a data YAML): the form of a classification dataset."""
    return "://" not in str(data) and Path(data).expanduser().is_dir()


def validate_class_folders(data: str | Path, limit: int = LABEL_SCAN_LIMIT) -> DatasetInfo:
    """Check the folder, its splits, class folders and a sample of images; raise DatasetError."""
    root = resolved_path("data", Path(data).expanduser())
    if not root.is_dir():
        hint = ("a classification dataset is a folder (train/<class>/*.jpg), not a data YAML"
                if root.suffix in (".yaml", ".yml") else "point `data` at the dataset folder")
        raise DatasetError("data", f"dataset folder not found: {root}", hint)
    train = root / "train"
    if not train.is_dir():
        raise DatasetError("data", f"{root} has no train/ folder (ultralytics would split the folder in place)",
                           "arrange it as train/<class>/*.jpg and val/<class>/*.jpg")
    names = _class_names("train", train)
    val = next((root / n for n in VAL_FOLDERS if (root / n).is_dir()), None)
    test = root / "test" if (root / "test").is_dir() else None
    if val is None and test is None:
        raise DatasetError("data", f"{root} has no val/ (or validation/, valid/) or test/ folder",
                           "add val/<class>/*.jpg with a few images of each class")
    warnings: list[str] = []
    splits = {"train": _check_split("train", train, names, limit, warnings)}
    for key, folder in (("val", val or test), ("test", test)):
        if folder is not None:
            splits[key] = _check_split(key, folder, names, limit, warnings)
    return DatasetInfo(yaml_path=str(root), root=str(root), names=names, splits=splits,
                       warnings=tuple(warnings))


def _class_names(key: str, folder: Path) -> tuple[str, ...]:
    names = tuple(sorted(entry.name for entry in os.scandir(folder) if entry.is_dir()))
    if not names:
        raise DatasetError(f"data.{key}", f"{folder} has no class folders",
                           f"put each class's images in {folder}/<class>/")
    return names


def _check_split(key: str, folder: Path, names: tuple[str, ...], limit: int, warnings: list[str]) -> SplitInfo:
    no_loop(f"data.{key}", folder)
    present = _class_names(key, folder)
    extra = [name for name in present if name not in names]
    if extra:
        warnings.append(f"data.{key}: class folder {folder.name}/{extra[0]} is not in train/ "
                        f"({len(extra)} such); ultralytics leaves its images out")
    images: list[str] = []
    for name in names:
        if name not in present:
            if key == "train":
                continue  # not reachable: train's folders are the names
            warnings.append(f"data.{key}: no {folder.name}/{name} folder: class {name!r} is not validated")
            continue
        found = [f for f in walk_files(key, str(folder / name)) if f.rpartition(".")[-1].lower() in IMG_FORMATS]
        if not found and key == "train":
            raise DatasetError(f"data.{key}", f"{folder / name} has no images",
                               "add images of that class, or remove the empty folder")
        images += sorted(found)
    if not images:
        raise DatasetError(f"data.{key}", f"no images under {folder}",
                           f"put image files in {folder}/<class>/")
    checked = sample(images, limit)
    for path in checked:
        _verify_image(key, path)
    if len(checked) < len(images):
        warnings.append(f"data.{key}: verified {len(checked)} of {len(images)} images (an even sample)")
    return SplitInfo(name=key, sources=(str(folder),), images=len(images), labelled=len(images),
                     checked=len(checked), boxes=0)


def _verify_image(key: str, path: str) -> None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
            width, height = image.size
    except Exception as exc:  # noqa: BLE001 (any decoder failure; ultralytics may patch Image.open)
        raise DatasetError(f"data.{key}", f"{path} does not decode as an image ({type(exc).__name__}: "
                           f"{str(exc)[:120]})", "replace or remove the file") from None
    if min(width, height) < MIN_SIDE:
        raise DatasetError(f"data.{key}", f"{path} is {width}x{height} px, under ultralytics' {MIN_SIDE} px minimum",
                           "remove the file or replace it with a larger image")

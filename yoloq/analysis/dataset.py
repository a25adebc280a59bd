"""Dataset validation for a data YAML, without ultralytics (a classification folder is handed
to `class_folders`; masks and depth maps are checked by `dense_labels`).

Paths resolve like ultralytics' `check_det_dataset`: `train`/`val`/`test` are
relative to `path`; a relative `path` is taken from the data YAML's folder (a
missing `path` means that folder). Note that ultralytics itself resolves a
relative `path` from the current directory, so yoloq hands training a copy of
the YAML with `path` made absolute (`DatasetInfo.resolved_data()`).

Labels are YOLO rows `cls cx cy w h` (or polygon rows `cls x1 y1 x2 y2 ...`,
which ultralytics turns into boxes) in the `labels/` mirror of `images/`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from yoloq.analysis.class_folders import validate_class_folders
from yoloq.analysis.dataset_files import (IMG_FORMATS, LABEL_SCAN_LIMIT, DatasetInfo, SplitInfo,  # noqa: F401
                                          no_loop, resolved_path, walk_files)
from yoloq.analysis.dense_labels import mask_lookup, mirror, scan_depth, scan_masks
from yoloq.analysis.labels import LabelFormat, LabelScan, sample, scan_labels
from yoloq.analysis.strict_yaml import DuplicateKey, load_yaml
from yoloq.base.errors import DatasetError

def load_data_yaml(path: str | Path) -> dict[str, Any]:
    """Read the data YAML; every problem is a DatasetError naming `data`."""
    path = Path(path)
    no_loop("data", path)
    if not path.is_file():
        raise _data_yaml_missing(path)
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except DuplicateKey as exc:
        raise DatasetError("data", f"{path.name}: key {exc.key!r} given twice (lines {exc.first_line} and "
                           f"{exc.second_line})", "delete one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise DatasetError("data", f"{path.name} is not valid YAML{where}", "fix the YAML syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError("data", f"cannot read {path.name}: {exc}", "make it a readable UTF-8 file") from None
    if not isinstance(raw, dict):
        raise DatasetError("data", f"{path.name} must be a mapping with path, train, val and names",
                           "see the ultralytics detection dataset format")
    return raw


def _data_yaml_missing(path: Path) -> DatasetError:
    """Not found; for a name ultralytics would download (coco8.yaml), say that yoloq does not."""
    from yoloq.analysis.ultralytics_cfg import package_root

    if (package_root() / "cfg" / "datasets" / path.name).is_file():
        return DatasetError("data", f"dataset YAML not found: {path}; {path.name!r} is one of ultralytics' "
                            "download datasets, and yoloq downloads nothing (it runs offline)",
                            "download the dataset yourself and point `data` at its data YAML")
    return DatasetError("data", f"dataset YAML not found: {path}", "point `data` at an existing data YAML")


def check_names(data: dict[str, Any]) -> tuple[str, ...]:
    """`names` as a tuple; it must exist and agree with `nc` (list or {index: name} form)."""
    names = data.get("names")
    if names is None:
        raise DatasetError("data.names", "missing", "add `names:` with one name per class")
    if isinstance(names, dict):
        try:
            keyed = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise DatasetError("data.names", "keys must be class indices 0, 1, ...",
                               "write `names: {0: cat, 1: dog}` or a list") from None
        if sorted(keyed) != list(range(len(keyed))):
            raise DatasetError("data.names", f"indices must be 0-{len(keyed) - 1} without gaps",
                               "number the classes from 0")
        names = [keyed[i] for i in range(len(keyed))]
    if not isinstance(names, list):
        raise DatasetError("data.names", f"must be a list or a mapping, not {type(names).__name__}",
                           "write `names: [cat, dog]`")
    if not names:
        raise DatasetError("data.names", "is empty", "give at least one class name")
    _check_each_name(names)
    nc = data.get("nc")
    if nc is not None:
        if isinstance(nc, bool) or not isinstance(nc, int):
            raise DatasetError("data.nc", f"must be an integer, not {nc!r}", "write the number of classes")
        if nc != len(names):
            raise DatasetError("data.names", f"{len(names)} names but nc is {nc}",
                               "make nc match the names list")
    return tuple(str(n) for n in names)


def _check_each_name(names: list[Any]) -> None:
    """No null or empty names (ultralytics would call the class "None" or ""), no name twice."""
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name is None or isinstance(name, (dict, list)) or not str(name).strip():
            shown = "null" if name is None else repr(name)
            raise DatasetError("data.names", f"class {index} has no name ({shown})",
                               f"give class {index} a name")
        text = str(name)
        if text in seen:
            raise DatasetError("data.names", f"{text!r} is the name of classes {seen[text]} and {index}",
                               "give every class its own name (merge the classes in the labels if they are one)")
        seen[text] = index


def resolve_root(data: dict[str, Any], yaml_path: Path) -> Path:
    raw = data.get("path")
    if raw is not None and not isinstance(raw, str):
        raise DatasetError("data.path", f"must be a string, not {type(raw).__name__}", "write a folder path")
    root = Path(raw).expanduser() if raw else yaml_path.parent
    if not root.is_absolute():
        root = yaml_path.parent / root
    root = resolved_path("data.path", root)
    if not root.is_dir():
        raise DatasetError("data.path", f"folder not found: {root}",
                           "set `path` to the dataset folder (relative to the data YAML, or absolute)")
    return root


def resolve_split(data: dict[str, Any], key: str, root: Path) -> list[Path]:
    """The split's sources (folders or .txt lists) as absolute paths; each must exist."""
    value = data.get(key)
    if isinstance(value, str):
        entries = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        entries = value
    else:
        raise DatasetError(f"data.{key}", "missing" if value is None else "must be a path or a list of paths",
                           f"add `{key}: images/{key}` (relative to `path`)")
    resolved = []
    for entry in entries:
        target = resolved_path(f"data.{key}", root / entry)
        if not target.exists() and entry.startswith("../"):
            target = resolved_path(f"data.{key}", root / entry[3:])  # ultralytics' fallback
        if not target.exists():
            raise DatasetError(f"data.{key}", f"not found: {target}",
                               f"create it, or fix `{key}` (it is relative to {root})")
        resolved.append(target)
    return resolved


def list_images(key: str, sources: list[Path]) -> list[str]:
    """Image files under folders (recursive) and in .txt lists, as ultralytics finds them."""
    found: list[str] = []
    for source in sources:
        if source.is_dir():
            found += walk_files(key, str(source))
        else:
            found += _read_list(key, source)
    images = sorted(f for f in found if f.rpartition(".")[-1].lower() in IMG_FORMATS)
    if not images:
        where = ", ".join(str(s) for s in sources)
        raise DatasetError(f"data.{key}", f"no images in {where}",
                           f"put image files ({', '.join(sorted(('jpg', 'png', 'bmp', 'webp')))}, ...) there")
    return images


def _read_list(key: str, path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8-sig").strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"data.{key}", f"cannot read image list {path}: {exc}",
                           "give a folder or a UTF-8 .txt list of images") from None
    parent = str(path.parent) + os.sep
    return [line.replace("./", parent, 1) if line.startswith("./") else line for line in map(str.strip, lines)
            if line]


def label_path(image: str) -> Path:
    """ultralytics' img2label_paths: the last /images/ becomes /labels/, suffix .txt."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return Path(sb.join(image.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt")


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def label_format(task: str, data: dict[str, Any]) -> LabelFormat:
    """The label rows a `task` model trains from, with the data YAML's own checks for it:
    pose needs `kpt_shape: [K, 2|3]` (and a `flip_idx` that is a permutation of the K
    keypoints, when given); a pose dataset (one with `kpt_shape`) needs a pose model."""
    from yoloq.domain.tasks import task as task_row

    other = _dense_dataset_task(data)
    if other and other != task:
        raise DatasetError("data", f"the dataset is {_a(task_row(other).label)} dataset ({_DENSE_KEYS[other]} in the "
                           f"data YAML) and the model {_a(task_row(task).label)} model",
                           f"train {_a(task_row(other).label)} model such as {task_row(other).example}, or give a "
                           "dataset of the model's task")
    if task == "semantic":
        mask_lookup(data, len(data.get("names") or ()))  # a malformed label_mapping fails here, once
        return LabelFormat("semantic", masks_dir=str(data.get("masks_dir") or ""),
                           label_mapping=tuple((data.get("label_mapping") or {}).items()))
    if task == "depth":
        return LabelFormat("depth", depth_scale=data.get("depth_scale", DEFAULT_DEPTH_SCALE))
    shape = data.get("kpt_shape")
    if task != "pose":
        if shape is not None:
            raise DatasetError("data.kpt_shape", f"the dataset is a pose dataset (kpt_shape {shape}) and the "
                               f"model {_a(task_row(task).label)} model",
                               "train a pose model such as yolov8n-pose.yaml, or give a dataset of the model's task")
        return LabelFormat(task)
    if (not isinstance(shape, list) or len(shape) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                  for v in shape)
            or shape[0] < 1 or shape[1] not in (2, 3)):
        found = "missing" if shape is None else f"{shape!r}"
        raise DatasetError("data.kpt_shape", f"{found}: a pose model needs kpt_shape: [K, 2|3] in the data YAML",
                           "add kpt_shape: [K, 3] (K keypoints, each x y visibility), e.g. [17, 3] for COCO")
    flip = data.get("flip_idx")
    if flip is not None and (not isinstance(flip, list) or sorted(flip) != list(range(shape[0]))):
        raise DatasetError("data.flip_idx", f"{flip!r} is not a permutation of the {shape[0]} keypoints",
                           f"list each keypoint's mirror image under a horizontal flip, {shape[0]} indices "
                           f"0-{shape[0] - 1} (or leave flip_idx out: then flips are off)")
    return LabelFormat("pose", keypoints=shape[0], dims=shape[1])


_DENSE_KEYS = {"semantic": "masks_dir", "depth": "depth_scale"}  # a data YAML key only that task's datasets have
DEFAULT_DEPTH_SCALE = 1000  # ultralytics' DEPTH_PNG_SCALE: PNG value per metre


def _dense_dataset_task(data: dict[str, Any]) -> str:
    return next((task for task, key in _DENSE_KEYS.items() if data.get(key) is not None), "")


def validate_local_dataset(data_yaml: str | Path, limit: int = LABEL_SCAN_LIMIT,
                           task: str = "detect") -> DatasetInfo:
    """Check a local data YAML, its image folders and the label files a `task` model trains
    from; raise DatasetError.

    `yoloq.analysis.validate.validate_dataset` also takes `s3://` datasets.
    """
    yaml_path = resolved_path("data", Path(data_yaml).expanduser())
    if task == "classify" or yaml_path.is_dir():
        return _class_folders(yaml_path, limit, task)
    data = load_data_yaml(yaml_path)
    names = check_names(data)
    fmt = label_format(task, data)
    root = resolve_root(data, yaml_path)
    warnings: list[str] = []
    splits: dict[str, SplitInfo] = {}
    for key in ("train", "val", "test"):
        if key == "test" and not data.get("test"):
            continue
        sources = resolve_split(data, key, root)
        splits[key] = _check_split(key, sources, names, root, limit, warnings, fmt)
    return DatasetInfo(yaml_path=str(yaml_path), root=str(root), names=names, splits=splits,
                       warnings=tuple(warnings))


_LABEL_KINDS = {"semantic": ("mask", ".png", "ultralytics leaves them out"),
                "depth": ("depth map", ".png", "ultralytics leaves them out")}


def _scan_task_labels(images: list[str], names: tuple[str, ...], root: Path, fmt: LabelFormat) -> LabelScan:
    """The task's label check: text rows, or a mask or depth map per image."""
    if fmt.task == "depth":
        return scan_depth(images, fmt.depth_scale, root)
    if fmt.task == "semantic" and fmt.masks_dir:
        invalid = mask_lookup({"label_mapping": dict(fmt.label_mapping)}, len(names))
        return scan_masks(images, fmt.masks_dir, invalid, len(names), root)
    return scan_labels(images, label_path, len(names), root, fmt)


def _class_folders(path: Path, limit: int, task: str) -> DatasetInfo:
    """A classification dataset (a folder of class folders), for a classification model only."""
    from yoloq.domain.tasks import task as task_row

    if task != "classify":
        raise DatasetError("data", f"{path} is a folder, the form of a classification dataset, and the model "
                           f"{_a(task_row(task).label)} model",
                           "point `data` at the dataset's data YAML, or train a classifier such as yolov8n-cls.yaml")
    if path.suffix in (".yaml", ".yml") or path.is_file():
        raise DatasetError("data", f"{path.name} is a data YAML (a detection-style dataset) and the model a "
                           "classification model, which trains from a folder of class folders",
                           "point `data` at a folder with train/<class>/ and val/<class>/, or train a "
                           "detection model such as yolov8n.yaml")
    return validate_class_folders(path, limit)


def _check_split(key: str, sources: list[Path], names: tuple[str, ...], root: Path, limit: int,
                 warnings: list[str], fmt: LabelFormat = LabelFormat()) -> SplitInfo:
    images = list_images(key, sources)
    checked = sample(images, limit)
    if any(source.is_file() for source in sources):  # image lists may name files that are gone
        missing = [image for image in checked if not os.path.isfile(image)]
        if missing:
            raise DatasetError(f"data.{key}", f"{len(missing)} listed images do not exist (e.g. {missing[0]})",
                               "fix the image list so every line is an existing file")
    scan = _scan_task_labels(checked, names, root, fmt)
    if len(checked) < len(images):
        warnings.append(f"data.{key}: checked the labels of {len(checked)} of {len(images)} images "
                        f"(an even sample; the rest were not read)")
    folder, kind = fmt.labels_folder, _LABEL_KINDS.get(fmt.task if fmt.task == "depth" or fmt.masks_dir else "",
                                                       ("label file", ".txt", "trained as background"))
    if scan.labelled == 0 and key == "train":
        example = mirror(checked[0], folder, kind[1])
        raise DatasetError(f"data.{key}", f"no {kind[0]}s found for {len(checked)} images "
                           f"(looked in the {folder}/ mirror of images/, e.g. {example})",
                           f"put one {kind[1]} per image under {folder}/, mirroring images/")
    if scan.labelled < scan.checked:
        warnings.append(f"data.{key}: {scan.checked - scan.labelled} of {scan.checked} images have no "
                        f"{kind[0]} ({kind[2]})")
    return SplitInfo(name=key, sources=tuple(str(s) for s in sources), images=len(images),
                     labelled=scan.labelled, checked=scan.checked, boxes=scan.boxes)

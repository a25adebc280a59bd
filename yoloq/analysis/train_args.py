"""`train_args`: refuse before queueing what ultralytics would reject, or act on surprisingly.

Three layers, first problem wins (one line: field, problem, fix):
1. arguments yoloq owns or refuses (`OWNED`, `REFUSED`), with the reason;
2. ultralytics' own `check_cfg(hard=True)`, mirrored over its tables (read by
   `ultralytics_cfg` without importing it), with one difference: booleans are not numbers
   (ultralytics takes `multi_scale: true` as 1.0 and `seed: true` as 1);
3. values its trainer rejects later (optimizer names, `cache`, `freeze`, `pretrained`,
   `workers`, `lr0`).
Whether a `pretrained` file exists is checked by the analysis, not here (the spec is
parsed again on workers, where paths may differ).
"""

from __future__ import annotations

import difflib
from typing import Any, NamedTuple

from yoloq.analysis.ultralytics_cfg import CfgTables, tables

# Arguments yoloq sets itself: at the top level of the spec, or managed by yoloq.
OWNED: dict[str, str] = {
    "model": "set `model` at the top level",
    "data": "set `data` at the top level",
    "epochs": "set `epochs` at the top level",
    "imgsz": "set `imgsz` at the top level",
    "batch": "set `batch` at the top level",
    "resume": "remove it: yoloq resumes jobs itself",
    "project": "remove it: yoloq chooses where runs are stored",
    "name": "set `name` at the top level",
    "exist_ok": "remove it: yoloq manages run folders",
    "save_dir": "remove it: yoloq manages run folders",
    "mode": "remove it: a job always trains",
    "task": "remove it: the task comes from the model",
    "save": "remove it: every segment saves a resumable checkpoint each epoch",
    "save_period": "remove it: every segment saves a resumable checkpoint each epoch",
}
# Arguments ultralytics accepts that yoloq cannot honour: (problem, fix).
REFUSED: dict[str, tuple[str, str]] = {
    "time": (("a time limit stops training by the clock and overrides `epochs`; yoloq schedules and "
              "resumes by epochs"), "remove it and set `epochs`"),
    "quantize": (("quantization-aware training is not supported by yoloq (segments resume float "
                  "training only)"), "remove it; train in float and quantize the exported model"),
    "device": (("yoloq gives each segment its GPU (CUDA_VISIBLE_DEVICES); a device here would be "
                "overridden"), "remove it"),
    "cfg": ("a cfg YAML would replace these arguments at train time, unchecked",
            "put the arguments in train_args instead"),
    "distill_model": (("knowledge distillation loads a second model at train time, which yoloq "
                       "neither checks nor resumes"), "remove it"),
}
_CACHE_VALUES = (True, False, "ram", "disk")
MAX_SEED = 2**32 - 1  # numpy.random.seed refuses larger seeds (ultralytics' init_seeds calls it)
_AMP_STRINGS = ("fp16", "bf16", "fp32")


class Problem(NamedTuple):
    key: str
    problem: str
    fix: str


def first_problem(args: dict[Any, Any]) -> Problem | None:
    """The first `train_args` entry that would fail or surprise at train time, or None."""
    cfg = tables()
    for key, value in args.items():
        found = check(str(key), value, cfg)
        if found:
            return found
    return None


def check(key: str, value: Any, cfg: CfgTables) -> Problem | None:
    if key in OWNED:
        return Problem(key, "is set by yoloq, not in train_args", OWNED[key])
    if key in REFUSED:
        return Problem(key, *REFUSED[key])
    if key not in cfg.defaults:
        return Problem(key, "unknown ultralytics argument" + suggest(key, cfg.defaults),
                       "see ultralytics' train settings (cfg/default.yaml)")
    return _check_cfg(key, value, cfg) or _trainer_checks(key, value, cfg)


def suggest(key: str, candidates: Any) -> str:
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_cfg(key: str, value: Any, cfg: CfgTables) -> Problem | None:
    """ultralytics.cfg.check_cfg(hard=True), bools refused as numbers."""
    typed = cfg.float_keys | cfg.fraction_keys | cfg.int_keys | cfg.bool_keys | cfg.str_keys | {"scale", "compile"}
    default = cfg.defaults.get(key)
    if value is None:
        if key == "amp" or (default is not None and key in typed and key != "auto_augment"):
            return Problem(key, "must not be null", f"write e.g. `{key}: {_yaml(default)}` or remove it")
        return None
    if key == "multi_scale" and isinstance(value, bool):
        return Problem(key, f"is a fraction of imgsz in this ultralytics (0.0 = off, 0.5 = sizes from 0.5x "
                       f"to 1.5x imgsz), not {_yaml(value)}", "write e.g. `multi_scale: 0.5`, or 0.0 for off")
    if key in cfg.float_keys:
        return None if _is_number(value) else _not_a_number(key, value, default)
    if key == "scale":
        return _scale(value)
    if key in cfg.fraction_keys:
        return _fraction(key, value, default)
    if key in cfg.int_keys:
        return _integer(key, value, default, cfg.int_min.get(key))
    if key in cfg.bool_keys and not isinstance(value, bool):
        return Problem(key, f"must be true or false, not {_yaml(value)}", f"write `{key}: {_yaml(bool(default))}`")
    if key in cfg.str_keys and not isinstance(value, str):
        return Problem(key, f"must be a string, not {_yaml(value)}", f"write e.g. `{key}: {_yaml(default)}`")
    if key == "compile" and not isinstance(value, (bool, str)):
        return Problem(key, f"must be true, false or a torch.compile mode, not {_yaml(value)}", "write `compile: false`")
    if key == "amp" and not isinstance(value, bool) and str(value).lower() not in _AMP_STRINGS:
        return Problem(key, f"must be true, false, fp16, bf16 or fp32, not {_yaml(value)}", "write `amp: true`")
    return None


def _not_a_number(key: str, value: Any, default: Any) -> Problem:
    example = default if _is_number(default) else 1.0
    return Problem(key, f"must be a number, not {_yaml(value)}", f"write e.g. `{key}: {example}`")


def _scale(value: Any) -> Problem | None:
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(_is_number(v) for v in value):
            return None
        return Problem("scale", f"must be a number or [min, max], not {_yaml(value)}", "write e.g. `scale: 0.5`")
    if not _is_number(value):
        return _not_a_number("scale", value, 0.5)
    if not 0.0 <= value <= 1.0:
        return Problem("scale", f"{value} is outside 0.0-1.0", "write e.g. `scale: 0.5`")
    return None


def _fraction(key: str, value: Any, default: Any) -> Problem | None:
    if key == "fraction" and isinstance(value, list):
        ok = len(value) in (2, 3) and all(value[:2]) and all(
            (type(x) is int and x >= 0) or (type(x) is float and 0.0 <= x <= 1.0) for x in value)
        return None if ok else Problem(key, f"{_yaml(value)} is not [train, val] or [train, val, test] "
                                       "counts or ratios", "write e.g. `fraction: 0.5`")
    if not _is_number(value):
        return _not_a_number(key, value, default)
    if key == "fraction":
        if 0.0 < value <= 1.0 or (isinstance(value, int) and value > 1):
            return None
        return Problem(key, f"{value} is neither a ratio in (0, 1] nor a count > 1", "write e.g. `fraction: 0.5`")
    if not 0.0 <= value <= 1.0:
        return Problem(key, f"{value} is outside 0.0-1.0 (ultralytics refuses it)",
                       f"use a value between 0.0 and 1.0, e.g. {default}")
    return None


def _integer(key: str, value: Any, default: Any, minimum: int | None) -> Problem | None:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        return Problem(key, f"must be a whole number, not {_yaml(value)}", f"write e.g. `{key}: {default}`")
    if minimum is not None and value < minimum:
        return Problem(key, f"{value} is below {minimum} (ultralytics refuses it)", f"use a value >= {minimum}")
    return None


def _trainer_checks(key: str, value: Any, cfg: CfgTables) -> Problem | None:
    """What ultralytics' trainer and dataloader reject or misread after check_cfg passed."""
    if key == "optimizer":
        names = {name.lower(): name for name in cfg.optimizers}
        if str(value).lower() not in names:
            return Problem(key, f"unknown optimizer {value!r}" + suggest(str(value), sorted(cfg.optimizers)),
                           f"use one of: {', '.join(sorted(cfg.optimizers))}")
    if key == "lr0" and value == 0:
        return Problem(key, "0 never updates the weights", "use e.g. `lr0: 0.01`")
    if key == "seed" and value > MAX_SEED:
        return Problem(key, f"{value} is above {MAX_SEED} (numpy's seed limit; training would fail)",
                       "use a seed between 0 and 4294967295")
    if key == "workers" and value < 0:
        return Problem(key, f"{value} is negative (the dataloader refuses it)", "use 0 or more")
    if key == "cache" and value not in _CACHE_VALUES:
        return Problem(key, f"must be true, false, ram or disk, not {_yaml(value)}", "write `cache: false`")
    if key == "freeze":
        return _freeze(value)
    if key == "pretrained":
        return _pretrained(value)
    if key == "classes":
        return _classes(value)
    return None


def _freeze(value: Any) -> Problem | None:
    if _is_number(value) and isinstance(value, int) and value >= 0:
        return None
    if isinstance(value, list) and all((isinstance(v, int) and not isinstance(v, bool) and v >= 0)
                                       or isinstance(v, str) for v in value):
        return None
    return Problem("freeze", f"must be a layer count or a list of layer indices/names, not {_yaml(value)}",
                   "write e.g. `freeze: 10`")


def _pretrained(value: Any) -> Problem | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.lower().endswith(".pt"):
        return None
    return Problem("pretrained", f"must be true, false or a local .pt file, not {_yaml(value)}",
                   "write e.g. `pretrained: weights/yolov8n.pt`")


def _classes(value: Any) -> Problem | None:
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in items):
        return None
    return Problem("classes", f"must be a class id or a list of class ids, not {_yaml(value)}",
                   "write e.g. `classes: [0, 2]`")


def yolonas_problem(args: dict[str, Any]) -> Problem | None:
    """(field, problem, fix) for the first train_arg the YOLO-NAS engine does not take."""
    from yoloq.analysis.families import NAS_OPTIMIZERS, NAS_TRAIN_ARGS

    for key, value in args.items():
        if key not in NAS_TRAIN_ARGS:
            return Problem(f"train_args.{key}", "is not a YOLO-NAS training argument (its engine would not use it)",
                    f"remove it; a YOLO-NAS job takes {', '.join(NAS_TRAIN_ARGS)}")
        if key == "optimizer" and value not in NAS_OPTIMIZERS:
            return Problem("train_args.optimizer", f"{value!r} is not an optimizer of the YOLO-NAS engine",
                    f"use {' or '.join(NAS_OPTIMIZERS)}")
    return None


def advice(args: dict[str, Any]) -> list[str]:
    """Warnings for values that are valid but do something a user may not expect."""
    notes = []
    if str(args.get("optimizer", tables().defaults.get("optimizer"))).lower() == "auto":
        ignored = [k for k in ("lr0", "momentum") if k in args]
        if ignored:
            notes.append(f"train_args.{ignored[0]}: ignored while optimizer is auto (ultralytics chooses "
                         f"{' and '.join(ignored)} itself) (fix: set `optimizer: SGD` or `AdamW` to use it)")
    return notes


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)

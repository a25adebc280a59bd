"""Job analysis without torch: validate a spec and its dataset, fingerprint checkpoints,
estimate memory and time, check the fit against a pool, and classify the job.

The names below are imported lazily, so that `yoloq.spec` can use the small modules of
this package (strict YAML, ultralytics' argument tables) without an import circle.
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager: the function `fingerprint` must win over the submodule of the same name (importing a
# submodule sets the package attribute, which a lazy __getattr__ would never override).
from yoloq.analysis.fingerprint import Fingerprint as Fingerprint
from yoloq.analysis.fingerprint import fingerprint as fingerprint

_EXPORTS = {
    "Analysis": "core", "analyse": "core", "analyse_file": "core",
    "DatasetInfo": "dataset", "validate_local_dataset": "dataset",
}
__all__ = ["Analysis", "DatasetInfo", "Fingerprint", "analyse", "analyse_file", "fingerprint",
           "validate_local_dataset"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'yoloq.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"yoloq.analysis.{_EXPORTS[name]}"), name)

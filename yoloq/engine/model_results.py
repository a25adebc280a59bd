"""What evaluating and exporting a model return, whichever engine trained it.

Below `evaluate` and `export` (the ultralytics path, which hands original YOLOv5 weights
to `engine.yolov5.finalise`) and below `finalise` itself, so neither side imports the other
back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class EvalResult:
    split: str                                  # "test" or "val"
    metrics: dict[str, float]                   # e.g. "metrics/mAP50(B)": 0.61
    per_class: list[dict[str, Any]]             # rows for a table artifact
    speed_ms: dict[str, float] = field(default_factory=dict)  # per image: inference, ...
    save_dir: Path | None = None

    @property
    def table(self) -> list[dict[str, Any]]:
        """The per-class rows, under the name Prefect's table artifact uses."""
        return self.per_class


def evaluation_split(data: Path) -> str:
    """`test` when the data YAML declares a non-empty test split (a classification folder: has
    a test/ folder), else `val`."""
    if Path(data).is_dir():
        return "test" if (Path(data) / "test").is_dir() else "val"
    config = yaml.safe_load(Path(data).read_text()) or {}
    return "test" if config.get("test") else "val"


# Largest raw-output difference accepted, relative to the output's magnitude (fp32 exports
# measured about 1e-7 here: float reassociation, not a different model).
OUTPUT_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ExportedModel:
    format: str
    path: Path
    size: int                        # bytes
    verification: dict[str, float]   # validation metrics of the exported file itself
    verified_by: str                 # how: "ultralytics val (torchscript)", ...
    max_output_diff: float           # largest |exported - PyTorch| raw output on one input


class ExportVerificationError(RuntimeError):
    """An exported file could not be loaded back or validated."""


@contextmanager
def validation_folder(exported: Path, prefix: str) -> Iterator[str]:
    """A scratch folder to validate an export in; any failure inside means "not verified"."""
    with tempfile.TemporaryDirectory(prefix=prefix) as project:
        try:
            yield project
        except ExportVerificationError:
            raise
        except Exception as error:  # whatever validation raised, the export is not verified
            raise ExportVerificationError(f"{exported.name}: validation of the export failed: "
                                          f"{error}") from error


def output_difference(exported: Path, reference: Any, candidate: Any) -> float:
    """The largest raw-output difference between PyTorch's weights and the export (tensors);
    another shape, or a difference over OUTPUT_TOLERANCE of the output's scale, fails."""
    if reference.shape != candidate.shape:
        raise ExportVerificationError(f"{exported.name}: output shape {tuple(candidate.shape)} "
                                      f"differs from PyTorch's {tuple(reference.shape)}")
    difference = float((reference - candidate).abs().max())
    if difference > OUTPUT_TOLERANCE * max(1.0, float(reference.abs().max())):
        raise ExportVerificationError(f"{exported.name}: outputs differ from PyTorch's by {difference:.3g}")
    return difference

"""GPU types yoloq knows: memory, relative training speed, and Training Units.

1 Training Unit (TU) = one V100 for 24 hours. `speed` is YOLO training throughput
relative to a V100 (mixed precision, batch filling the GPU); the figures are
rounded from public ultralytics/MLPerf-style comparisons and are meant for
scheduling and estimates, not for procurement. A declared CPU slot (no GPU) is
counted at `CPU_SLOT.speed`.

Names match **exactly** (case and repeated blanks aside): a catalog name
(`A100-80GB`), or an entry of `ALIASES`, which lists short names (`T4`, `L40S`)
and the product names NVML reports (`NVIDIA A100-SXM4-80GB`, `Tesla T4`). There is
no substring matching: `A100` is ambiguous (40 or 80 GB) and refused with both
choices, `L40S` never means an L4. A real GPU whose NVML name is not listed is
charged at `DEFAULT_UNKNOWN_SPEED` (a V100's) by `device_speed`, which logs one
warning per name; add the name to `ALIASES` to charge it correctly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

TU_SECONDS = 24 * 3600
DEFAULT_UNKNOWN_SPEED = 1.0  # a real GPU missing from ALIASES is charged as a V100
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuType:
    name: str
    mem_gb: float
    speed: float  # throughput relative to a V100 (= 1.0)

    def tu(self, seconds: float) -> float:
        """Training Units consumed by `seconds` on one GPU of this type."""
        return self.speed * seconds / TU_SECONDS


CATALOG: dict[str, GpuType] = {g.name: g for g in (
    GpuType("T4-16GB", 16, 0.45),
    GpuType("V100-16GB", 16, 1.0),
    GpuType("V100-32GB", 32, 1.0),
    GpuType("A10-24GB", 24, 0.9),
    GpuType("L4-24GB", 24, 0.8),
    GpuType("RTX4090-24GB", 24, 1.8),
    GpuType("A100-40GB", 40, 2.2),
    GpuType("A100-80GB", 80, 2.4),
    GpuType("L40S-48GB", 48, 1.9),
    GpuType("H100-80GB", 80, 3.5),
    GpuType("H200-141GB", 141, 3.9),
    GpuType("CPU", 8, 0.01),
)}
CPU_SLOT = CATALOG["CPU"]
REFERENCE = CATALOG["V100-32GB"]

# Other names for catalog entries: short names, and product names as NVML / nvidia-smi report them.
# A variant with a different memory size or clock class (H100 PCIe, H100 NVL, V100S) is NOT listed:
# it is a different card, charged at the default until it gets its own catalog entry.
ALIASES: dict[str, str] = {
    "T4": "T4-16GB", "Tesla T4": "T4-16GB", "NVIDIA T4": "T4-16GB",
    "Tesla V100-SXM2-16GB": "V100-16GB", "Tesla V100-PCIE-16GB": "V100-16GB",
    "Tesla V100-SXM2-32GB": "V100-32GB", "Tesla V100-PCIE-32GB": "V100-32GB",
    "A10": "A10-24GB", "NVIDIA A10": "A10-24GB",
    "L4": "L4-24GB", "NVIDIA L4": "L4-24GB",
    "RTX4090": "RTX4090-24GB", "RTX 4090": "RTX4090-24GB", "NVIDIA GeForce RTX 4090": "RTX4090-24GB",
    "NVIDIA A100-SXM4-40GB": "A100-40GB", "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA A100 80GB PCIe": "A100-80GB",
    "L40S": "L40S-48GB", "NVIDIA L40S": "L40S-48GB",
    "H100": "H100-80GB", "NVIDIA H100 80GB HBM3": "H100-80GB",
    "H200": "H200-141GB", "NVIDIA H200": "H200-141GB",
}
# Short names that stand for more than one catalog entry: refused, naming the choices.
AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "V100": ("V100-16GB", "V100-32GB"),
    "A100": ("A100-40GB", "A100-80GB"),
}


class UnknownGpu(KeyError):
    """A GPU name that is neither a catalog name nor an alias (or an ambiguous short name)."""

    def __init__(self, name: str, hint: str) -> None:
        super().__init__(name)
        self.name = name
        self.hint = hint


def _key(name: str) -> str:
    return " ".join(str(name).split()).upper()


_INDEX: dict[str, str] = {_key(k): v for k, v in (*((n, n) for n in CATALOG), *ALIASES.items())}
_AMBIGUOUS_INDEX = {_key(k): v for k, v in AMBIGUOUS.items()}
_warned: set[str] = set()


def lookup(name: str) -> GpuType:
    """The catalog entry for a catalog name or an alias (exact, ignoring case and repeated blanks).

    Raises UnknownGpu (a KeyError) for anything else; its `hint` says what to write.
    """
    key = _key(name)
    if key in _INDEX:
        return CATALOG[_INDEX[key]]
    if key in _AMBIGUOUS_INDEX:
        raise UnknownGpu(name, f"{name!r} is ambiguous: write {' or '.join(_AMBIGUOUS_INDEX[key])}")
    raise UnknownGpu(name, f"use one of: {', '.join(CATALOG)} (or an alias listed in yoloq/domain/gpus.py)")


def device_speed(name: str) -> float:
    """Speed of a real GPU by its NVML name; an unlisted name is charged DEFAULT_UNKNOWN_SPEED.

    The default is logged once per name and never replaced by another card's figure.
    """
    try:
        return lookup(name).speed
    except KeyError:
        if name not in _warned:
            _warned.add(name)
            _log.warning("GPU %r is not in yoloq's catalog: charged at the default speed %.1f (a V100's); "
                         "add it to yoloq/domain/gpus.py ALIASES", name, DEFAULT_UNKNOWN_SPEED)
        return DEFAULT_UNKNOWN_SPEED

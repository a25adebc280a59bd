"""GPU types yoloq knows: memory, relative training speed, and Training Units.

1 Training Unit (TU) = one V100 for 24 hours. `speed` is YOLO training throughput
relative to a V100 (mixed precision, batch filling the GPU); the figures are
rounded from public ultralytics/MLPerf-style comparisons and are meant for
scheduling and estimates, not for procurement. A declared CPU slot (no GPU) is
counted at `CPU_SLOT.speed`.
"""

from __future__ import annotations

from dataclasses import dataclass

TU_SECONDS = 24 * 3600


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


def lookup(name: str) -> GpuType:
    """Find a GPU type by catalog name or by an NVML-style product name.

    "NVIDIA A100-SXM4-80GB" and "a100-80gb" both resolve to A100-80GB.
    Raises KeyError when nothing matches.
    """
    key = name.upper().replace("NVIDIA", "").replace(" ", "").replace("_", "-")
    if key in CATALOG:
        return CATALOG[key]
    for gpu in CATALOG.values():
        family, _, mem = gpu.name.partition("-")
        if family in key and (mem in key or mem.replace("GB", "G") in key):
            return gpu
    for gpu in CATALOG.values():
        family = gpu.name.partition("-")[0]
        if family in key:
            return gpu
    raise KeyError(name)

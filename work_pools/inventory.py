"""GPU inventory: real GPUs from NVML, or a declared inventory on hosts without GPUs.

A declared slot is never reported as a real GPU: its `kind` is "declared" and its
name says so. `YOLOQ_DECLARED_GPUS` declares slots as `N` or `NxNAME:MEM_GB`
(e.g. `2`, `2xCPU:8`, `1xA100-80GB:80,1xT4-16GB:16`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yoloq.base.errors import UserError
from yoloq.settings import settings


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    mem_total_gb: float
    mem_free_gb: float
    kind: str = "nvml"  # "nvml" or "declared"
    processes: tuple[int, ...] = field(default_factory=tuple)

    @property
    def is_real(self) -> bool:
        return self.kind == "nvml"


def inventory(declared: str | None = None) -> list[GpuInfo]:
    """Real GPUs when NVML finds any (unless a declaration is given), else declared slots."""
    spec = declared if declared is not None else settings().declared_gpus
    if spec:
        return declared_inventory(spec)
    real = nvml_inventory()
    return real if real else declared_inventory("1")


def nvml_inventory() -> list[GpuInfo]:
    """Every GPU NVML sees, with free memory and the PIDs using it; [] without a driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        return [_nvml_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def _nvml_gpu(pynvml, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    name = pynvml.nvmlDeviceGetName(handle)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    try:
        procs = tuple(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except pynvml.NVMLError:
        procs = ()
    return GpuInfo(index=index, uuid=uuid if isinstance(uuid, str) else uuid.decode(),
                   name=name if isinstance(name, str) else name.decode(),
                   mem_total_gb=mem.total / 2**30, mem_free_gb=mem.free / 2**30, processes=procs)


def declared_inventory(spec: str) -> list[GpuInfo]:
    """Parse `N` or `NxNAME:MEM` items separated by commas into declared slots."""
    slots: list[GpuInfo] = []
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        count, _, rest = item.partition("x") if "x" in item.split(":")[0] else (item, "", "")
        name, _, mem = rest.partition(":")
        try:
            n, mem_gb = int(count), float(mem or 8)
        except ValueError:
            raise UserError("YOLOQ_DECLARED_GPUS", f"cannot read {item!r}",
                            "write N or NxNAME:MEM_GB, e.g. 2xCPU:8") from None
        for _ in range(n):
            i = len(slots)
            slots.append(GpuInfo(index=i, uuid=f"declared-{i}", name=f"declared {name or 'CPU'} slot",
                                 mem_total_gb=mem_gb, mem_free_gb=mem_gb, kind="declared"))
    return slots

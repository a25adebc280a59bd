"""GPU inventory: NVML when a driver exists, else declared slots that never pass for real GPUs;
and the worker type registered with Prefect through the entry point."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from work_pools.inventory import declared_inventory, inventory, nvml_inventory
from yoloq.base.errors import UserError


@pytest.mark.parametrize(("spec", "names", "mems"), [
    pytest.param("2", ["declared CPU slot"] * 2, [8.0, 8.0], id="count-only"),
    pytest.param("1xCPU:4", ["declared CPU slot"], [4.0], id="named-with-memory"),
    pytest.param("1xA100-80GB:80,1xT4-16GB:16", ["declared A100-80GB slot", "declared T4-16GB slot"],
                 [80.0, 16.0], id="mixed-types"),
])
def test_declared_inventory(spec, names, mems):
    slots = declared_inventory(spec)
    assert [s.name for s in slots] == names
    assert [s.mem_total_gb for s in slots] == mems
    assert [s.index for s in slots] == list(range(len(slots)))
    assert not any(s.is_real for s in slots), "declared slots are never reported as real GPUs"


def test_bad_declaration_is_a_one_line_error():
    with pytest.raises(UserError, match="YOLOQ_DECLARED_GPUS"):
        declared_inventory("twoxCPU:eight")


def test_without_a_driver_nvml_finds_nothing_and_a_slot_is_declared(monkeypatch):
    monkeypatch.delenv("YOLOQ_DECLARED_GPUS", raising=False)
    real = nvml_inventory()
    found = inventory()
    if real:  # a GPU host: NVML wins and reports real devices
        assert all(g.is_real and g.uuid.startswith("GPU-") for g in found)
    else:
        assert [g.kind for g in found] == ["declared"]


@pytest.mark.service
def test_prefect_creates_a_yolo_gpu_pool_from_the_entry_point(yoloq_stack):
    env = {**os.environ, "PREFECT_API_URL": yoloq_stack.api_url}
    out = subprocess.run([sys.executable, "-m", "prefect", "work-pool", "create", "entry-point-pool",
                          "--type", "yolo-gpu"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        pool = client.read_work_pool("entry-point-pool")
        client.delete_work_pool("entry-point-pool")
    assert pool.type == "yolo-gpu"
    properties = pool.base_job_template["variables"]["properties"]
    assert {"working_dir", "stream_output", "grace_seconds"} <= set(properties)
    assert all(p.get("description") for p in properties.values()), "every variable is documented"

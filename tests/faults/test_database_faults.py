"""Fault matrix, database family, on the cluster profile (Prefect on PostgreSQL, checkpoints
in Swift S3, an MLflow server): PostgreSQL stopped and started again (data kept) while a
segment trains. The PostgreSQL restarted is a throw-away cluster of this test (started by
the project's `services.sh` in its own folder and port), never the shared one."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import cluster_helpers
import pytest
from fault_helpers import (
    assert_job_recovered,
    report,
    epoch_reached,
    running_segment,
    segments,
)
from stack_helpers import wait_for, write_spec

pytestmark = [pytest.mark.service, pytest.mark.training, pytest.mark.integration,
              pytest.mark.timeout(1500)]

DOWN_S = 10.0  # how long PostgreSQL stays stopped


class OwnPostgres:
    """A PostgreSQL cluster of this test alone, through `services.sh` (own folder and port)."""

    def __init__(self) -> None:
        from yoloq.ops.stack import free_port

        self.folder = folder = Path(tempfile.mkdtemp(prefix="yoloq-pg-"))
        folder.chmod(0o755)  # the postgres user must reach it
        self.port = free_port()
        self.env = {**os.environ, "YOLOQ_SERVICES_DIR": str(folder), "YOLOQ_PG_PORT": str(self.port)}
        self.url = f"postgresql+asyncpg://prefect:prefect@127.0.0.1:{self.port}/prefect"

    def ctl(self, action: str) -> None:
        done = subprocess.run(["bash", str(cluster_helpers.SERVICES), action, "postgres"],
                              env=self.env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture
def own_postgres(monkeypatch):
    """The cluster pool on the shared S3 but on a PostgreSQL this test may restart."""
    pg = OwnPostgres()
    pg.ctl("start")
    shared = cluster_helpers.cluster_services
    monkeypatch.setattr(cluster_helpers, "cluster_services",
                        lambda: {**shared(), "PREFECT_API_DATABASE_CONNECTION_URL": pg.url})
    try:
        yield pg
    finally:
        pg.ctl("stop")
        shutil.rmtree(pg.folder, ignore_errors=True)


def test_postgres_restarted_mid_training(own_postgres, session_dir, tmp_path):
    """The job's first segment is inside epoch 2 when PostgreSQL stops for DOWN_S; the
    server, the runner, the node agent and the segment reconnect; the job completes with
    every epoch trained once and later segments admitted after the restart."""
    from yoloq.datasets.synth import synth_dataset

    data = synth_dataset(session_dir / "faults160", train=160, val=8, imgsz=64, seed=2)
    with cluster_helpers.cluster_pool(tmp_path, "a", "1xCPU:8") as pool:
        job = pool.submit(write_spec(tmp_path / "job.yaml", data, name="pg-restart", epochs=3,
                                     segment_epochs=2, batch=16, export=[]))
        wait_for(lambda: epoch_reached(job, 1), "epoch 1 checkpointed", 900)
        training = running_segment(job)
        stopped_at = time.monotonic()
        own_postgres.ctl("stop")
        time.sleep(DOWN_S)
        own_postgres.ctl("start")
        back_s = time.monotonic() - stopped_at
        result = assert_job_recovered(job, 3, cli=pool.cli)
        done_s = time.monotonic() - stopped_at
        names = [f"{s.name}:{s.state.name}" for s in segments(job)]
        assert len(names) >= 2, names  # a segment was queued and ran after the restart
        assert result["trainings"] == {1: 1, 2: 1, 3: 1}, result["trainings"]
        assert any(n.name == "a" for n in cluster_helpers.live_nodes()), "node a heartbeats again"
    report("PostgreSQL restarted mid-training", down_s=round(back_s, 1),
           completed_after_s=round(done_s, 1), segment=training.name, segments=names,
           trainings=result["trainings"])

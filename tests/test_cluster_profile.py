"""The cluster profile's services for real: a Prefect server on PostgreSQL, checkpoints in S3
(Swift), an MLflow server with S3 artifacts. A tiny job in two segments runs end to end on
them, and everything it leaves is in the shared stores, none of it on the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from cluster_helpers import cluster_services, remove_s3_prefixes, reset_prefect_database
from stack_helpers import wait_final, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.service, pytest.mark.training]


@pytest.fixture(scope="module")
def cluster_env() -> dict[str, str]:
    return cluster_services()


def test_a_job_runs_on_postgres_s3_and_an_mlflow_server(cluster_env, tiny_dataset, tmp_path):
    from yoloq.ops import mlflow_server
    from yoloq.ops.stack import free_port

    run = uuid.uuid4().hex[:8]
    home = tmp_path / "node"
    reset_prefect_database(cluster_env["PREFECT_API_DATABASE_CONNECTION_URL"])
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PREFECT_", "YOLOQ_CHECKPOINT", "YOLOQ_MLFLOW"))}
    base.update(cluster_env)
    mlflow_port = free_port()
    server = mlflow_server.start(mlflow_port, f"sqlite:///{tmp_path / 'mlflow.db'}",
                                 f"s3://{cluster_env['YOLOQ_S3_BUCKET']}/mlflow-{run}", env=base,
                                 log_path=str(tmp_path / "mlflow.log"))
    env = {**base, "YOLOQ_HOME": str(home), "YOLOQ_PORT": str(free_port()),
           "YOLOQ_PROFILE": "cluster", "YOLOQ_CHECKPOINT_URI": f"s3://{cluster_env['YOLOQ_S3_BUCKET']}/ckpt-{run}",
           "YOLOQ_MLFLOW_URI": f"http://127.0.0.1:{mlflow_port}", "YOLOQ_DECLARED_GPUS": "1xCPU:8",
           "YOLOQ_MIN_RUNTIME_S": "0"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "yoloq.cli", *args], capture_output=True,
                              text=True, timeout=300, env=env)

    try:
        assert cli("up").returncode == 0
        spec = write_spec(tmp_path / "job.yaml", tiny_dataset, name="clustered", epochs=2,
                          segment_epochs=1, export=["torchscript"])
        out = cli("submit", str(spec), "--json")
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["job_id"]
        status = wait_final(job_id, 600, cli=cli)
        assert status["state"] == "Completed" and status["segments"] == 2, status
        _assert_shared_state(env, job_id, run)
    finally:
        cli("down")
        mlflow_server.stop(server)
        remove_s3_prefixes(cluster_env, f"ckpt-{run}", f"mlflow-{run}")
    assert not (home / "checkpoints").exists() or not any((home / "checkpoints").iterdir()), \
        "checkpoints live in S3, not on the node"
    assert _alive(server.pid) is False, "the MLflow server and its workers are gone"


def _alive(pgid: int) -> bool:
    import psutil

    return any(p.info["pid"] != os.getpid() and _pgid(p) == pgid
               for p in psutil.process_iter(["pid"]))


def _pgid(proc) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None


def _assert_shared_state(env: dict[str, str], job_id: str, run: str) -> None:
    import asyncio

    import asyncpg
    from mlflow.tracking import MlflowClient

    from blocks.checkpoints import store_from_uri

    saved = os.environ.copy()
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        store = store_from_uri(env["YOLOQ_CHECKPOINT_URI"])
        assert [c.epoch for c in store.list(job_id)] == [1, 2]
        client = MlflowClient(env["YOLOQ_MLFLOW_URI"])
        [mlrun] = client.search_runs([client.get_experiment_by_name("yoloq").experiment_id],
                                     filter_string=f"tags.`yoloq.job_id` = '{job_id}'")
        steps = [m.step for m in client.get_metric_history(mlrun.info.run_id, "train/box_loss")]
        assert sorted(steps) == [1, 2]  # both epochs delivered
        from yoloq.records.jobs import epoch_trainings, trainings_per_epoch

        ledger = epoch_trainings(job_id, store)  # the only record that can show a repeat
        assert trainings_per_epoch(ledger) == {1: 1, 2: 1}
        assert len({r.segment for r in ledger}) == 2, "two segments, one epoch each"
        assert client.search_model_versions("name = 'clustered'"), "registered via the server"
        artifacts = [a.path for a in client.list_artifacts(mlrun.info.run_id, "training")]
        assert any(p.endswith("results.csv") for p in artifacts)
    finally:
        os.environ.clear()
        os.environ.update(saved)

    async def count_runs() -> int:
        url = env["PREFECT_API_DATABASE_CONNECTION_URL"].replace("postgresql+asyncpg://",
                                                                 "postgresql://")
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval("SELECT count(*) FROM flow_run WHERE name LIKE $1",
                                       f"{job_id}%")
        finally:
            await conn.close()

    assert asyncio.run(count_runs()) == 3, "the parent and its two segments are in PostgreSQL"

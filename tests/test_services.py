"""`profiles/cluster/services.sh`: the real loopback PostgreSQL and Swift (s3api) services.

These tests run their own instances in a private folder on ports of their own, so
they never touch services a developer (or the checkpoint store tests) already runs.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVICES = REPO / "profiles" / "cluster" / "services.sh"
PORTS = {"YOLOQ_S3_PORT": "28080", "YOLOQ_SWIFT_OBJECT_PORT": "26200",
         "YOLOQ_SWIFT_CONTAINER_PORT": "26201", "YOLOQ_SWIFT_ACCOUNT_PORT": "26202",
         "YOLOQ_MEMCACHED_PORT": "26211", "YOLOQ_PG_PORT": "54339"}

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def services_dir() -> Any:
    # The postgres user must reach the folder: mkdtemp makes it 0700.
    folder = Path(tempfile.mkdtemp(prefix="yoloq-services-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    run_script(folder, "stop", "all")
    shutil.rmtree(folder, ignore_errors=True)


def run_script(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **PORTS, "YOLOQ_SERVICES_DIR": str(folder)}
    return subprocess.run([str(SERVICES), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def exports(folder: Path) -> dict[str, str]:
    result = run_script(folder, "env")
    assert result.returncode == 0, result.stderr
    values = {}
    for line in result.stdout.splitlines():
        _, assignment = shlex.split(line)
        key, _, value = assignment.partition("=")
        values[key] = value
    return values


def processes_mentioning(*needles: str) -> list[str]:
    """Command lines of live (non-zombie) processes that contain any of the needles."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline and any(needle in cmdline for needle in needles):
            found.append(cmdline)
    return found


def started(folder: Path, target: str) -> subprocess.CompletedProcess[str]:
    result = run_script(folder, "start", target)
    if result.returncode != 0:
        pytest.fail(f"services.sh start {target} failed (rc {result.returncode}):\n{result.stderr[-3000:]}")
    return result


def test_env_prints_endpoint_credentials_bucket_and_database_url(services_dir: Path) -> None:
    values = exports(services_dir)

    assert values["YOLOQ_S3_ENDPOINT_URL"] == "http://127.0.0.1:28080"
    assert values["AWS_ENDPOINT_URL"] == values["YOLOQ_S3_ENDPOINT_URL"]
    assert (values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"]) == ("test:tester", "testing")
    assert values["YOLOQ_S3_BUCKET"] == "yoloq"
    assert values["YOLOQ_CHECKPOINT_URI"] == "s3://yoloq/yoloq/checkpoints"
    assert values["PREFECT_API_DATABASE_CONNECTION_URL"] == \
        "postgresql+asyncpg://prefect:prefect@127.0.0.1:54339/prefect"


def test_unknown_command_prints_usage() -> None:
    result = subprocess.run([str(SERVICES), "launch", "s3"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "services.sh start" in result.stderr


def test_postgres_starts_accepts_a_connection_and_stops(services_dir: Path) -> None:
    started(services_dir, "postgres")
    again = started(services_dir, "postgres")
    assert "already running" in again.stderr

    url = exports(services_dir)["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert asyncio.run(_database_and_user(url)) == ("prefect", "prefect")

    assert run_script(services_dir, "stop", "postgres").returncode == 0
    assert processes_mentioning(str(services_dir / "postgres")) == []
    assert "postgres: stopped" in run_script(services_dir, "status").stdout


async def _database_and_user(url: str) -> tuple[str, str]:
    import asyncpg

    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        row = await connection.fetchrow("SELECT current_database(), current_user")
        return row[0], row[1]
    finally:
        await connection.close()


def test_s3_starts_checks_signatures_and_stops(services_dir: Path) -> None:
    import boto3
    from botocore.exceptions import ClientError

    from blocks.s3 import make_s3_client

    started(services_dir, "s3")
    pids = sorted((services_dir / "s3" / "run").glob("*.pid"))
    before = [p.read_text() for p in pids]
    assert "already running" in started(services_dir, "s3").stderr
    assert [p.read_text() for p in pids] == before  # idempotent: the same processes

    values = exports(services_dir)
    client = make_s3_client(values["YOLOQ_S3_ENDPOINT_URL"], "us-east-1",
                            values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"])
    bucket = values["YOLOQ_S3_BUCKET"]
    client.put_object(Bucket=bucket, Key="probe/one", Body=b"one")
    assert client.get_object(Bucket=bucket, Key="probe/one")["Body"].read() == b"one"
    deleted = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "probe/one"}]})
    assert [d["Key"] for d in deleted.get("Deleted", [])] == ["probe/one"]

    impostor = boto3.client("s3", endpoint_url=values["YOLOQ_S3_ENDPOINT_URL"], region_name="us-east-1",
                            aws_access_key_id=values["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong")
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        impostor.list_objects_v2(Bucket=bucket)

    assert run_script(services_dir, "stop", "s3").returncode == 0
    assert processes_mentioning(str(services_dir / "s3"), f"-p {PORTS['YOLOQ_MEMCACHED_PORT']}") == []
    assert "s3: stopped" in run_script(services_dir, "status").stdout


def test_a_busy_port_is_a_clear_error(services_dir: Path) -> None:
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", int(PORTS["YOLOQ_S3_PORT"])))
        squatter.listen()
        result = run_script(services_dir, "start", "s3")

    assert result.returncode != 0
    assert "127.0.0.1:28080 is already in use" in result.stderr

"""An MLflow tracking server for the cluster profile: runs in SQLite (or any database URI),
artifacts in S3 through the server (`--artifacts-destination`), offline settings applied.

    python -m yoloq.ops.mlflow_server --port 15000 --backend-store-uri sqlite:///mlflow.db \\
        --artifacts-destination s3://yoloq/mlflow

S3 endpoint and credentials come from the environment (`profiles/cluster/services.sh env`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request

SERVER_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # else about 2 GB in 10 processes
    # Swift's s3api predates the flexible checksums current botocore sends by default.
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


def start(port: int, backend_store_uri: str, artifacts_destination: str,
          env: dict[str, str] | None = None, log_path: str | None = None,
          timeout_s: float = 90) -> subprocess.Popen:
    """Start the server in its own session and wait until /health answers (refused on a taken
    port: another server's /health would answer for it)."""
    from yoloq.ops.stack import port_taken

    if port_taken(port):
        raise RuntimeError(f"mlflow server: port {port} is already in use by another process")
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", backend_store_uri, "--artifacts-destination",
               artifacts_destination, "--workers", "1"]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(command, env={**(env or os.environ), **SERVER_ENV}, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop(proc)
            raise RuntimeError(f"mlflow server exited with {proc.returncode} (log: {log_path})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"mlflow server did not answer on port {port} within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop the server and its uvicorn children (they share the server's session)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
    # the group leader has exited; make sure no child outlived it
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=15000)
    parser.add_argument("--backend-store-uri", required=True)
    parser.add_argument("--artifacts-destination", required=True)
    args = parser.parse_args()
    proc = start(args.port, args.backend_store_uri, args.artifacts_destination)
    print(f"mlflow server on http://127.0.0.1:{args.port} (pid {proc.pid})")
    proc.wait()


if __name__ == "__main__":
    main()

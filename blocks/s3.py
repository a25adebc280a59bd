"""The S3 checkpoint store, tested against OpenStack Swift's s3api on loopback.

A PUT is atomic in S3, so the data object then the metadata object give the same
guarantee as the local store's rename. Big files go up in multipart uploads. Two
gaps of Swift's s3api shape the client: no conditional PUT (If-None-Match), which
yoloq does not need (one writer per job and content-addressed data keys), and
DeleteObjects requires a Content-MD5 header that current botocore no longer sends,
so a `before-sign` hook adds it.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Iterable

from pydantic import Field, PrivateAttr, SecretStr

from blocks.checkpoint_base import CheckpointStore, MissingObject

_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_MULTIPART_THRESHOLD = 16 * 1024 * 1024
_DELETE_BATCH = 1000


def add_content_md5(request: Any, **_: Any) -> None:
    """botocore event hook: give DeleteObjects the Content-MD5 header Swift requires."""
    body = request.body
    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, (bytes, bytearray)) and "Content-MD5" not in request.headers:
        request.headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()


def make_s3_client(endpoint_url: str | None, region_name: str, access_key_id: str | None,
                   secret_access_key: str | None) -> Any:
    """A boto3 S3 client that works with AWS and with S3-compatible servers such as Swift."""
    import boto3
    from botocore.config import Config

    custom_endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(
        s3={"addressing_style": "path" if custom_endpoint else "auto"},
        retries={"max_attempts": 5, "mode": "standard"},
        # Older S3-compatible servers reject the newer default flexible checksums.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=region_name,
        aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key, config=config)
    client.meta.events.register("before-sign.s3.DeleteObjects", add_content_md5)
    return client


def _is_missing(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code")) in _MISSING_CODES


class S3CheckpointStore(CheckpointStore):
    """Checkpoints in an S3 bucket (AWS or any S3-compatible server), reachable from every node."""

    _block_type_name = "yoloq S3 Checkpoint Store"
    _description = ("yoloq training checkpoints in an S3 bucket, so a preempted job can resume "
                    "on another node. Data is PUT first, then its metadata (sha256, epoch).")

    bucket: str = Field(description="Bucket name (it must exist).")
    prefix: str = Field(default="yoloq/checkpoints", description="Key prefix inside the bucket.")
    endpoint_url: str | None = Field(
        default=None, description="S3 endpoint for non-AWS servers, e.g. http://127.0.0.1:18080. "
                                  "Empty: AWS_ENDPOINT_URL or AWS itself.")
    region_name: str = Field(default="us-east-1", description="Region used to sign requests.")
    access_key_id: str | None = Field(default=None, description="Empty: boto3's credential chain.")
    secret_access_key: SecretStr | None = Field(default=None, description="Empty: boto3's credential chain.")

    _client: Any = PrivateAttr(default=None)
    _client_lock: Any = PrivateAttr(default_factory=threading.Lock)

    def location(self) -> str:
        return f"s3://{self.bucket}/{self.prefix.strip('/')}"

    def client(self) -> Any:
        """The boto3 client, created once per block instance (boto3 clients are thread-safe)."""
        with self._client_lock:
            if self._client is None:
                secret = self.secret_access_key.get_secret_value() if self.secret_access_key else None
                self._client = make_s3_client(self.endpoint_url, self.region_name,
                                              self.access_key_id, secret)
            return self._client

    def _object_key(self, key: str) -> str:
        prefix = self.prefix.strip("/")
        return f"{prefix}/{key}" if prefix else key

    def _put_file(self, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(multipart_threshold=_MULTIPART_THRESHOLD,
                                  multipart_chunksize=_MULTIPART_THRESHOLD, max_concurrency=4)
        self.client().upload_file(str(path), self.bucket, self._object_key(key), Config=transfer)

    def _put_bytes(self, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=self._object_key(key), Body=data,
                                 ContentType="application/json")

    def _get_object(self, key: str) -> dict[str, Any]:
        try:
            return self.client().get_object(Bucket=self.bucket, Key=self._object_key(key))
        except Exception as exc:
            if _is_missing(exc):
                raise MissingObject(key) from exc
            raise

    def _get_bytes(self, key: str) -> bytes:
        return self._get_object(key)["Body"].read()

    def _download(self, key: str, dest: Path) -> None:
        response = self._get_object(key)
        with open(dest, "wb") as out:
            for chunk in response["Body"].iter_chunks(1 << 20):
                out.write(chunk)

    def _list_keys(self, job_id: str) -> builtins.list[str]:
        root = self._object_key("")
        paginator = self.client().get_paginator("list_objects_v2")
        keys = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{root}{job_id}/"):
            keys.extend(item["Key"][len(root):] for item in page.get("Contents", []))
        return keys

    def _delete_keys(self, keys: Iterable[str]) -> None:
        objects = [{"Key": self._object_key(key)} for key in keys]
        for start in range(0, len(objects), _DELETE_BATCH):
            batch = objects[start:start + _DELETE_BATCH]
            response = self.client().delete_objects(Bucket=self.bucket,
                                                    Delete={"Objects": batch, "Quiet": True})
            failed = [e for e in response.get("Errors", []) if str(e.get("Code")) not in _MISSING_CODES]
            if failed:
                raise RuntimeError(f"S3 refused to delete {len(failed)} object(s): {failed[:3]}")

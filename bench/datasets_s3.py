"""What an S3 dataset costs: `analyse` from S3 against the local check, a node's first copy
against a reuse, and the requests each makes.

    bash profiles/cluster/services.sh start s3
    eval "$(bash profiles/cluster/services.sh env)"
    python bench/datasets_s3.py [--train 1000] [--val 250]

Writes a synthetic shapes dataset (64 px), uploads it under a fresh prefix of the
profile's bucket, then times `validate_dataset` on the local folder and
`validate_s3_dataset` on the upload (counting GetObject requests and image reads),
and `sync_dataset` into an empty cache, then again (a reuse). Deletes the upload.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blocks.s3 import make_s3_client
from yoloq.analysis.dataset import IMG_FORMATS
from yoloq.analysis.validate import validate_dataset
from yoloq.datasets.cache import DatasetCache
from yoloq.datasets.s3_analysis import validate_s3_dataset
from yoloq.datasets.sync import sync_dataset
from yoloq.datasets.synth import synth_dataset


def timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    return fn(), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--val", type=int, default=250)
    args = parser.parse_args()
    bucket = os.environ.get("YOLOQ_S3_BUCKET")
    if not bucket or not os.environ.get("AWS_ENDPOINT_URL"):
        print("S3 settings missing: run `eval \"$(bash profiles/cluster/services.sh env)\"` first")
        return 2
    client = make_s3_client(None, "us-east-1", None, None)
    gets: list[str] = []
    client.meta.events.register("before-parameter-build.s3.GetObject",
                                lambda params, **_: gets.append(params["Key"]))
    with tempfile.TemporaryDirectory(prefix="yoloq-bench-") as tmp:
        data_yaml = synth_dataset(Path(tmp) / "shapes", train=args.train, val=args.val, imgsz=64,
                                  relative_path=True)
        prefix = f"bench/datasets/{uuid.uuid4().hex[:8]}"
        files = [p for p in data_yaml.parent.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        _, upload_s = timed(lambda: upload(client, bucket, prefix, data_yaml.parent, files))
        uri = f"s3://{bucket}/{prefix}/data.yaml"
        try:
            report(client, gets, data_yaml, uri, Path(tmp) / "cache", len(files), size, upload_s)
        finally:
            keys = [{"Key": f"{prefix}/{p.relative_to(data_yaml.parent).as_posix()}"} for p in files]
            for start in range(0, len(keys), 1000):  # S3 deletes at most 1000 keys a request
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys[start:start + 1000]})
    return 0


def upload(client: Any, bucket: str, prefix: str, root: Path, files: list[Path]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: client.upload_file(str(p), bucket, f"{prefix}/{p.relative_to(root).as_posix()}"),
                      files))


def report(client: Any, gets: list[str], data_yaml: Path, uri: str, cache_root: Path, objects: int,
           size: int, upload_s: float) -> None:
    local, local_s = timed(lambda: validate_dataset(data_yaml))
    gets.clear()
    remote, remote_s = timed(lambda: validate_s3_dataset(uri, client=client))
    analyse_gets = len(gets)
    images_read = sum(k.rpartition(".")[-1].lower() in IMG_FORMATS for k in gets)
    same = {k: (v.images, v.boxes) for k, v in local.splits.items()} == \
           {k: (v.images, v.boxes) for k, v in remote.splits.items()}
    cache = DatasetCache(cache_root, 1 << 40)
    gets.clear()
    first, first_s = timed(lambda: sync_dataset(uri, cache=cache, client=client))
    first_gets = len(gets)
    first.lease.release()
    gets.clear()
    again, again_s = timed(lambda: sync_dataset(uri, cache=cache, client=client))
    again.lease.release()
    print(f"dataset: {objects} objects, {size / 1e6:.1f} MB (uploaded in {upload_s:.1f} s)")
    print(f"analyse   local {local_s:6.2f} s | s3 {remote_s:6.2f} s  ratio {remote_s / local_s:6.1f}x  "
          f"GETs {analyse_gets}, images read {images_read}, same figures: {same}")
    print(f"sync      first {first_s:6.2f} s | reuse {again_s:6.2f} s  ratio {first_s / again_s:6.1f}x  "
          f"GETs {first_gets} | {len(gets)}, reused: {not again.copied}")


if __name__ == "__main__":
    raise SystemExit(main())

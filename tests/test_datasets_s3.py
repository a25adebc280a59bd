"""Datasets in S3, against the real Swift s3api server (`profiles/cluster/services.sh start s3`).

`analyse` checks an `s3://.../data.yaml` dataset exactly like the local copy without reading
any image; a node copies it once into its content-addressed cache, verified, and reuses it;
a changed object means a new folder; eviction is least-recently-used and never touches a
dataset in use; a partial copy is never used; a real segment trains from an s3:// dataset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_checkpoint_store import s3_env  # noqa: F401  (the module-scoped S3 server fixture)

from blocks.s3 import make_s3_client
from yoloq.base.retry import is_transient
from yoloq.analysis.dataset import IMG_FORMATS
from yoloq.datasets.validate import validate_dataset
from yoloq.datasets.cache import MANIFEST, DatasetCache
from yoloq.datasets.s3_analysis import validate_s3_dataset
from yoloq.datasets.s3_source import DatasetUnreachable, open_s3_dataset
from yoloq.datasets.sync import sync_dataset, sync_opened
from yoloq.base.errors import DatasetError
from yoloq.datasets.synth import synth_dataset

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]


class CountingClient:
    """A real boto3 client plus the keys of every GetObject it sent (a botocore event hook)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.client = make_s3_client(env["YOLOQ_S3_ENDPOINT_URL"], "us-east-1", env["AWS_ACCESS_KEY_ID"],
                                     env["AWS_SECRET_ACCESS_KEY"])
        self.gets: list[str] = []
        self._lock = threading.Lock()
        self.client.meta.events.register("before-parameter-build.s3.GetObject", self._record)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            self.gets.append(params["Key"])

    def images_read(self) -> list[str]:
        return [k for k in self.gets if k.rpartition(".")[-1].lower() in IMG_FORMATS]

    def reset(self) -> None:
        self.gets.clear()


@pytest.fixture
def s3(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> CountingClient:  # noqa: F811
    """The server's settings in this process's environment (as on a node) and a counting client."""
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, s3_env[key])
    monkeypatch.setenv("YOLOQ_CHECKPOINT_URI", f"s3://{s3_env['YOLOQ_S3_BUCKET']}/tests/ckpt-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("YOLOQ_USE_BLOCKS", "0")
    return CountingClient(s3_env)


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_dataset(tmp_path_factory.mktemp("shapes") / "shapes", train=10, val=5, imgsz=32, seed=3,
                         relative_path=True)


def upload(s3: CountingClient, bucket: str, data_yaml: Path, prefix: str | None = None) -> str:
    """Upload the dataset folder under a fresh prefix; its data YAML's s3:// URI."""
    prefix = prefix or f"tests/datasets/{uuid.uuid4().hex[:10]}"
    root = data_yaml.parent
    for path in sorted(root.rglob("*")):
        if path.is_file():
            s3.client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return f"s3://{bucket}/{prefix}/{data_yaml.name}"


def put(s3: CountingClient, uri: str, body: bytes) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    s3.client.put_object(Bucket=bucket, Key=key, Body=body)


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:  # noqa: F811
    return s3_env["YOLOQ_S3_BUCKET"]


# ---------------------------------------------------------------- analyse


def test_s3_check_matches_the_local_check_and_reads_no_image(s3, bucket, local_dataset):
    uri = upload(s3, bucket, local_dataset)
    local = validate_dataset(local_dataset)
    s3.reset()
    remote = validate_s3_dataset(uri, client=s3.client)

    assert remote.names == local.names and remote.nc == local.nc == 3
    assert {k: (v.images, v.labelled, v.checked, v.boxes) for k, v in remote.splits.items()} == \
           {k: (v.images, v.labelled, v.checked, v.boxes) for k, v in local.splits.items()}
    assert remote.splits["train"].images == 10 and remote.splits["val"].images == 5
    assert remote.warnings == local.warnings == ()
    assert remote.yaml_path == uri and remote.root == uri.rsplit("/", 1)[0]
    assert s3.images_read() == [], "analyse must not download images"
    assert len(s3.gets) == 1 + 15, "the data YAML and one label file per image, nothing else"


def test_s3_sample_checks_the_same_label_files_as_local(s3, bucket, local_dataset):
    uri = upload(s3, bucket, local_dataset)
    local = validate_dataset(local_dataset, limit=3)
    remote = validate_s3_dataset(uri, limit=3, client=s3.client)

    assert [(v.images, v.checked, v.boxes) for v in remote.splits.values()] == \
           [(v.images, v.checked, v.boxes) for v in local.splits.values()]
    assert remote.splits["train"].checked == 3
    assert [w.split(":")[0] for w in remote.warnings] == ["data.train", "data.val"]
    assert remote.warnings == local.warnings


def test_analyse_of_an_s3_spec_gives_the_local_figures(s3, bucket, local_dataset):
    from yoloq.analysis import analyse
    from yoloq.domain.spec import parse_spec

    uri = upload(s3, bucket, local_dataset)
    spec = {"name": "s3-job", "team": "vision", "model": "yolov8n.yaml", "epochs": 2, "imgsz": 32,
            "batch": 4}
    local = analyse(parse_spec({**spec, "data": str(local_dataset)})).to_dict()
    remote = analyse(parse_spec({**spec, "data": uri}), validate=validate_dataset).to_dict()
    with pytest.raises(DatasetError, match="is in S3"):  # the local-only default says so
        analyse(parse_spec({**spec, "data": uri}))

    assert remote["data"] == uri and remote["dataset_root"] == uri.rsplit("/", 1)[0]
    different = {k for k in local if local[k] != remote[k]}
    assert different == {"data", "dataset_root"}


def test_a_workstation_path_in_the_yaml_is_ignored_with_a_warning(s3, bucket, tmp_path):
    absolute = synth_dataset(tmp_path / "abs", train=2, val=1, imgsz=32)  # path: /tmp/.../abs
    uri = upload(s3, bucket, absolute)
    info = validate_s3_dataset(uri, client=s3.client)

    assert info.root == uri.rsplit("/", 1)[0] and info.images("train") == 2
    assert len(info.warnings) == 1 and info.warnings[0].startswith("data.path: ")
    assert "is a local path" in info.warnings[0]


@pytest.mark.parametrize("damage, field, words", [
    pytest.param("missing_yaml", "data", "does not exist", id="missing-yaml"),
    pytest.param("missing_split", "data.val", "not found", id="missing-split"),
    pytest.param("bad_class", "labels/train/train_00001.txt:1", "class id 7 >= nc 3", id="bad-label"),
    pytest.param("bad_secret", "data", "access denied", id="bad-credentials"),
])
def test_s3_dataset_problems_are_one_line_errors(s3, bucket, local_dataset, s3_env, damage, field,  # noqa: F811
                                                 words):
    uri = upload(s3, bucket, local_dataset)
    root = uri.rsplit("/", 1)[0]
    client = s3.client
    if damage == "missing_yaml":
        uri = f"{root}/other.yaml"
    elif damage == "missing_split":
        put(s3, uri, yaml.safe_dump({"path": ".", "train": "images/train", "val": "images/valid",
                                     "names": ["a", "b", "c"]}).encode())
    elif damage == "bad_class":
        put(s3, f"{root}/labels/train/train_00001.txt", b"7 0.5 0.5 0.2 0.2\n")
    else:
        client = make_s3_client(s3_env["YOLOQ_S3_ENDPOINT_URL"], "us-east-1", s3_env["AWS_ACCESS_KEY_ID"],
                                "wrong-secret")
    with pytest.raises(DatasetError) as caught:
        validate_s3_dataset(uri, client=client)
    assert caught.value.field == field and words in caught.value.problem
    assert "\n" not in caught.value.line() and caught.value.fix
    if damage in ("missing_yaml", "bad_secret"):
        assert uri in caught.value.problem, "the error names the object"


def test_an_unreachable_endpoint_is_retried_by_segments_and_one_line_for_analyse(s3_env, tmp_path):  # noqa: F811
    from yoloq.ops.stack import free_port

    down = make_s3_client(f"http://127.0.0.1:{free_port()}", "us-east-1", s3_env["AWS_ACCESS_KEY_ID"],
                          s3_env["AWS_SECRET_ACCESS_KEY"])
    uri = "s3://yoloq/tests/datasets/nowhere/data.yaml"
    with pytest.raises(DatasetUnreachable) as caught:
        sync_dataset(uri, cache=cache_at(tmp_path), client=down)
    assert is_transient(caught.value) and uri in str(caught.value) and "reachable" in str(caught.value)
    with pytest.raises(DatasetError) as analysed:
        validate_s3_dataset(uri, client=down)
    assert analysed.value.field == "data" and uri in analysed.value.problem and "\n" not in str(analysed.value)


def test_a_missing_dataset_fails_the_segment_for_good(s3, bucket, tmp_path):
    uri = f"s3://{bucket}/tests/datasets/{uuid.uuid4().hex[:8]}/data.yaml"
    with pytest.raises(DatasetError) as caught:
        sync_dataset(uri, cache=cache_at(tmp_path), client=s3.client)
    assert not is_transient(caught.value) and caught.value.problem == f"{uri} does not exist"


# ---------------------------------------------------------------- the node cache


def cache_at(tmp_path: Path, max_bytes: int = 1 << 30, clock: Any = time.time) -> DatasetCache:
    return DatasetCache(tmp_path / "datasets", max_bytes, clock=clock)


def test_sync_copies_once_verified_then_reuses_without_download(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    cache = cache_at(tmp_path)
    first = sync_dataset(uri, cache=cache, client=s3.client)

    assert first.copied and first.folder == tmp_path / "datasets" / first.digest
    local_root = local_dataset.parent
    for path in local_root.rglob("*"):
        if path.is_file() and path.name != "data.yaml":
            assert (first.folder / path.relative_to(local_root)).read_bytes() == path.read_bytes()
    written = yaml.safe_load(first.data_yaml.read_text())
    assert first.data_yaml == first.folder / "data.yaml" and written["path"] == str(first.folder)
    assert written["names"] == ["rectangle", "ellipse", "triangle"]
    assert validate_dataset(first.data_yaml).splits["train"].boxes == \
           validate_dataset(local_dataset).splits["train"].boxes
    assert not list((tmp_path / "datasets").glob(".tmp-*")), "no temp folder is left"

    s3.reset()
    second = sync_dataset(uri, cache=cache, client=s3.client)
    assert not second.copied and second.folder == first.folder and second.data_yaml == first.data_yaml
    assert s3.gets == [uri.removeprefix(f"s3://{bucket}/")], "a reuse reads the data YAML only"
    first.lease.release()
    second.lease.release()


def test_a_changed_object_gives_a_new_folder(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    cache = cache_at(tmp_path)
    before = sync_dataset(uri, cache=cache, client=s3.client)
    put(s3, uri.rsplit("/", 1)[0] + "/labels/train/train_00002.txt", b"0 0.5 0.5 0.25 0.25\n")
    after = sync_dataset(uri, cache=cache, client=s3.client)

    assert after.copied and after.digest != before.digest
    assert (after.folder / "labels/train/train_00002.txt").read_bytes() == b"0 0.5 0.5 0.25 0.25\n"
    assert (before.folder / "labels/train/train_00002.txt").read_bytes() != b"0 0.5 0.5 0.25 0.25\n"
    assert sync_dataset(uri, cache=cache, client=s3.client).digest == after.digest  # stable


def test_resolve_dataset_holds_the_copy_in_use_for_the_process(s3, bucket, local_dataset, tmp_path,
                                                                 monkeypatch):
    """What a segment calls: the checkpoint store's S3 settings, the node's default cache under
    $YOLOQ_HOME/scratch, and a hold that keeps eviction away until the process ends."""
    from yoloq.datasets import resolve_dataset
    from yoloq.datasets import sync as sync_module
    from yoloq.datasets.cache import default_cache

    monkeypatch.setenv("YOLOQ_HOME", str(tmp_path / "node"))
    monkeypatch.setenv("YOLOQ_DATASET_CACHE_GB", "0.001")
    uri = upload(s3, bucket, local_dataset)
    assert resolve_dataset(str(local_dataset)) == local_dataset, "a shared-mount path is used as given"
    held = len(sync_module._HELD)
    try:
        local = resolve_dataset(uri)
        cache = default_cache()
        assert cache.root == tmp_path / "node" / "scratch" / "datasets" and local.parent.parent == cache.root
        assert yaml.safe_load(local.read_text())["path"] == str(local.parent)
        digest = local.parent.name
        assert cache.in_use(digest) and not cache.evict(digest) and local.is_file()
    finally:
        for lease in sync_module._HELD[held:]:
            lease.release()
        del sync_module._HELD[held:]
    assert default_cache().evict(digest) and not local.exists()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_eviction_takes_the_least_recently_used_and_never_one_in_use(s3, bucket, local_dataset, tmp_path):
    uris = [upload(s3, bucket, local_dataset) for _ in range(4)]  # four datasets of one size
    size = open_s3_dataset(uris[0], s3.client).size
    clock = FakeClock()
    cache = cache_at(tmp_path, max_bytes=int(2.5 * size), clock=clock)

    def sync(uri: str, at: float) -> Any:
        clock.now = at
        return sync_dataset(uri, cache=cache, client=s3.client)

    a = sync(uris[0], 1)  # oldest, and kept in use
    b = sync(uris[1], 2)
    b.lease.release()
    c = sync(uris[2], 3)  # needs room: a is in use, so b goes
    c.lease.release()
    assert a.folder.exists() and not b.folder.exists() and c.folder.exists()
    assert cache.in_use(a.digest) and not cache.in_use(c.digest)

    a.lease.release()
    d = sync(uris[3], 4)  # a is no longer in use and is the least recently used
    d.lease.release()
    assert not a.folder.exists() and c.folder.exists() and d.folder.exists()
    assert sum(e.bytes for e in cache.entries()) <= cache.max_bytes

    clock.now = 5
    assert cache.lookup(c.digest) == c.folder  # a use makes c the most recent: d goes next
    e = sync(uris[0], 6)
    e.lease.release()
    assert [x.digest for x in cache.entries()] == [c.digest, e.digest]


def test_a_dataset_larger_than_the_cache_is_refused(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    with pytest.raises(DatasetError) as caught:
        sync_dataset(uri, cache=cache_at(tmp_path, max_bytes=1000), client=s3.client)
    assert "more than the node's dataset cache" in caught.value.problem
    assert "YOLOQ_DATASET_CACHE_GB" in caught.value.fix
    assert not [p for p in (tmp_path / "datasets").iterdir() if p.name != ".locks"]


def test_an_object_changed_during_the_copy_leaves_nothing_behind(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    listed = open_s3_dataset(uri, s3.client)
    image = uri.rsplit("/", 1)[0] + "/images/val/val_00004.png"
    put(s3, image, b"not the listed image")  # replaced between the listing and the copy
    cache = cache_at(tmp_path)

    with pytest.raises(DatasetUnreachable) as caught:
        sync_opened(listed, cache, s3.client)
    assert image in str(caught.value) and "changed during the copy" in str(caught.value)
    assert is_transient(caught.value), "the segment ends Crashed and is retried, not Failed"
    assert not [p for p in (tmp_path / "datasets").iterdir() if p.name != ".locks"], \
        "neither the partial copy nor a cache folder may remain"


def test_a_damaged_cache_folder_is_copied_again(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    cache = cache_at(tmp_path)
    first = sync_dataset(uri, cache=cache, client=s3.client)
    first.lease.release()
    image = first.folder / "images/train/train_00003.png"
    good = image.read_bytes()
    image.write_bytes(good[: len(good) // 2])  # truncated on the node's disk

    again = sync_dataset(uri, cache=cache, client=s3.client)
    assert again.copied and again.folder == first.folder
    assert image.read_bytes() == good
    again.lease.release()


_KILLED_COPY = """
import sys, time
from blocks.s3 import make_s3_client
from yoloq.base.retry import is_transient
from yoloq.datasets.cache import DatasetCache
from yoloq.datasets.sync import sync_dataset
endpoint, key, secret, uri, root = sys.argv[1:]
client = make_s3_client(endpoint, "us-east-1", key, secret)
gets = []
def slow(**_):
    gets.append(1)
    if len(gets) == 6:
        print("copying", flush=True)
        time.sleep(600)
client.meta.events.register("before-call.s3.GetObject", slow)
sync_dataset(uri, cache=DatasetCache(root, 1 << 30), client=client)
"""


def test_a_copy_killed_halfway_is_never_used(s3, bucket, local_dataset, tmp_path, s3_env):  # noqa: F811
    uri = upload(s3, bucket, local_dataset)
    root = tmp_path / "datasets"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_COPY, s3_env["YOLOQ_S3_ENDPOINT_URL"],
                             s3_env["AWS_ACCESS_KEY_ID"], s3_env["AWS_SECRET_ACCESS_KEY"], uri, str(root)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "copying"
        partial = list(root.glob(".tmp-*"))
        assert len(partial) == 1 and any(p.is_file() for p in partial[0].rglob("*"))
    finally:
        proc.kill()
        proc.wait()
    cache = DatasetCache(root, 1 << 30)
    assert cache.entries() == [], "the killed copy is not a cache entry"

    synced = sync_dataset(uri, cache=cache, client=s3.client)
    assert synced.copied and not partial[0].exists(), "the partial copy was removed, not used"
    assert len(list(synced.folder.rglob("*.png"))) == 15
    synced.lease.release()


def test_two_segments_syncing_at_once_copy_once(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def segment() -> None:
        barrier.wait()
        results.append(sync_dataset(uri, cache=cache_at(tmp_path), client=s3.client))

    threads = [threading.Thread(target=segment) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(r.copied for r in results) == [False, True]
    assert results[0].folder == results[1].folder
    assert sorted(s3.images_read()) == sorted(set(s3.images_read())), "every image downloaded once"
    assert len(s3.images_read()) == 15
    assert (results[0].folder / MANIFEST).is_file()
    for result in results:
        result.lease.release()


# ---------------------------------------------------------------- a real segment

_SEGMENT = """
import json, sys
from flows.segment import train_segment
job_id, spec, stop = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
state = train_segment(job_id, spec, stop, return_state=True)
print("RESULT " + json.dumps({"type": state.type.value, "result": state.result(raise_on_failure=False)},
                             default=str), flush=True)
"""


@pytest.mark.training
def test_segments_train_from_an_s3_dataset_through_the_node_cache(s3, bucket, local_dataset, tmp_path):
    """Two `train-segment` flow runs on one node: the first copies the dataset, the second reuses
    it and finishes the job (evaluation reads the cached copy too). Checkpoints go to S3."""
    from blocks.checkpoints import store_from_uri
    from yoloq.analysis.fingerprint import read_header

    uri = upload(s3, bucket, local_dataset)
    job_id = f"s3data-{uuid.uuid4().hex[:8]}"
    spec = {"name": "s3data", "team": "vision", "priority": "normal", "model": "yolov8n.yaml", "data": uri,
            "epochs": 2, "imgsz": 32, "batch": 4, "segment_epochs": 1, "export": [],
            "train_args": {"seed": 0, "deterministic": True, "workers": 0, "plots": False}}
    node = tmp_path / "node"
    # No Prefect setting of the session stack (its profile names the stack's API URL): this node
    # process runs its flows on a throw-away ephemeral server of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(YOLOQ_HOME=str(node), PREFECT_HOME=str(node / "prefect"), YOLOQ_DATASET_CACHE_GB="1",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="240")  # a busy 2-core host

    def segment(stop: int) -> tuple[dict[str, Any], str]:
        out = subprocess.run([sys.executable, "-c", _SEGMENT, job_id, json.dumps(spec), str(stop)], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=500, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT ")), out.stdout + out.stderr

    first, log1 = segment(1)
    assert first["type"] == "COMPLETED" and first["result"]["epochs_done"] == 1, log1[-3000:]
    folders = [p for p in (node / "scratch" / "datasets").iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1 and (folders[0] / MANIFEST).is_file()
    assert f"dataset {uri}: copied to {folders[0]}" in log1

    store = store_from_uri(os.environ["YOLOQ_CHECKPOINT_URI"])
    restored = store.restore(job_id, tmp_path / "restore")
    assert restored is not None and restored.info.epoch == 1, "the checkpoint is in S3"
    assert read_header(restored.path)["train_args"]["data"] == str(folders[0] / "data.yaml")

    second, log2 = segment(2)
    assert second["type"] == "COMPLETED" and second["result"]["finished"] is True, log2[-3000:]
    assert f"dataset {uri}: reusing {folders[0]}" in log2
    assert "copying" not in log2.split("reusing")[0].split(f"dataset {uri}:")[-1]
    assert second["result"]["evaluation"]["metrics"], "evaluation ran on the cached copy"
    store.delete_job(job_id)


def test_yoloq_analyse_of_a_spec_file_with_s3_data(s3, bucket, local_dataset, tmp_path):
    """`yoloq analyse job.yaml` end to end: the spec keeps its s3:// data, the CLI prints the counts."""
    uri = upload(s3, bucket, local_dataset)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "a", "team": "t", "model": "yolov8n.yaml", "data": uri,
                                    "epochs": 2, "imgsz": 32, "batch": 4}))
    out = subprocess.run([sys.executable, "-m", "yoloq.cli", "analyse", str(path), "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    analysis = json.loads(out.stdout)
    assert (analysis["data"], analysis["train_images"], analysis["val_images"], analysis["nc"]) == (uri, 10, 5, 3)


def test_a_multipart_object_is_verified_by_its_multipart_etag(s3, bucket, local_dataset, tmp_path):
    uri = upload(s3, bucket, local_dataset)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(17 * 1024 * 1024 + 123))
    s3.client.upload_file(str(big), bucket, uri.removeprefix(f"s3://{bucket}/").rsplit("/", 1)[0] + "/extra/big.bin")
    listed = open_s3_dataset(uri, s3.client)
    assert next(o.etag for o in listed.objects if o.key == "extra/big.bin").endswith("-3"), "a 3-part upload"

    synced = sync_opened(listed, cache_at(tmp_path), s3.client)
    manifest = json.loads((synced.folder / MANIFEST).read_text())
    assert manifest["verified"] == {"md5": len(listed.objects) - 1, "multipart": 1}
    assert (synced.folder / "extra/big.bin").read_bytes() == big.read_bytes()
    synced.lease.release()


# ---------------------------------------------------------------- pure pieces


@pytest.mark.parametrize("value, expected", [
    pytest.param(None, 50 * 1024 ** 3, id="default-50"),
    pytest.param("0.5", 512 * 1024 ** 2, id="fraction"),
    pytest.param("200", 200 * 1024 ** 3, id="whole"),
])
def test_cache_bound_from_the_environment(monkeypatch, value, expected):
    from yoloq.datasets.cache import cache_limit_bytes

    if value is None:
        monkeypatch.delenv("YOLOQ_DATASET_CACHE_GB", raising=False)
    else:
        monkeypatch.setenv("YOLOQ_DATASET_CACHE_GB", value)
    assert cache_limit_bytes() == expected


@pytest.mark.parametrize("value", ["0", "-3", "lots", "inf", "nan"])
def test_a_bad_cache_bound_is_one_line_naming_the_setting(monkeypatch, value):
    from yoloq.datasets.cache import cache_limit_bytes
    from yoloq.base.errors import UserError

    monkeypatch.setenv("YOLOQ_DATASET_CACHE_GB", value)
    with pytest.raises(UserError) as caught:
        cache_limit_bytes()
    assert caught.value.field == "YOLOQ_DATASET_CACHE_GB" and repr(value) in caught.value.problem


@pytest.mark.parametrize("image", ["images/train/a.jpg", "x/images/val/b.c.PNG", "images/images/c.png",
                                   "data/imgs/d.jpg"])
def test_label_keys_follow_ultralytics(image):
    from yoloq.analysis.dataset import label_path
    from yoloq.datasets.s3_analysis import label_key

    assert "/root/" + label_key(image) == label_path("/root/" + image).as_posix()

"""What `bench/gpu_bundle.py` carries to a GPU host: the project's dependency closure, extras
included, less what the GPU image holds. Read from this venv's installed metadata."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[1] / "bench" / "gpu_bundle.py"


def load_bundle():
    spec = importlib.util.spec_from_file_location("gpu_bundle", BUNDLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_closure_follows_requested_extras():
    """Prefect asks for `sqlalchemy[asyncio]` and `httpx[http2]`: without greenlet the Prefect
    server does not start from the archive (the first rehearsal failed on it)."""
    closure = load_bundle().closure()
    assert {"prefect", "sqlalchemy", "greenlet", "httpx", "h2"} <= set(closure)


def test_the_archive_leaves_out_what_the_image_holds_and_keeps_the_rest():
    bundle = load_bundle()
    missing, image = set(bundle.missing()), bundle.image_packages()
    assert not missing & image and not missing & bundle.SKIP
    assert {"prefect", "ultralytics", "mlflow", "greenlet"} <= missing
    assert "torch" in image and "torch" not in missing

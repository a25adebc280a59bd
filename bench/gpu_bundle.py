"""The project's packages a lent GPU host lacks: `name==version` lines for bench/gpu_bundle.sh.

    python bench/gpu_bundle.py            # requirement lines, from this venv's installed versions
    python bench/gpu_bundle.py --estimate # also: their installed size and an xz estimate (MiB)

The closure of the project's dependencies (pyproject's list, markers read for Linux and
Python 3.12), less what the GPU image already holds (bench/gpu_image_packages.txt) and less
opencv-python (the image's opencv-python-headless provides `cv2`).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import lzma
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "extra": ""}
SKIP = {"opencv-python"}


def image_packages() -> set[str]:
    lines = (ROOT / "bench" / "gpu_image_packages.txt").read_text().splitlines()
    return {canonicalize_name(x) for x in lines if x.strip() and not x.startswith("#")}


def closure() -> dict[str, md.Distribution]:
    """Every distribution the project needs, extras included: `sqlalchemy[asyncio]` (Prefect's)
    brings greenlet, without which the Prefect server does not start."""
    roots = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [Requirement(r) for r in roots]
    found: dict[str, md.Distribution] = {}
    seen: set[tuple[str, str]] = set()  # (name, extra): "" for the distribution itself
    while todo:
        wanted = todo.pop()
        name = canonicalize_name(wanted.name)
        extras = {""} | set(wanted.extras)
        if {(name, e) for e in extras} <= seen:
            continue
        seen |= {(name, e) for e in extras}
        try:
            found[name] = found.get(name) or md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for line in found[name].requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({**TARGET, "extra": e}) for e in extras):
                todo.append(req)
    return found


def missing() -> dict[str, md.Distribution]:
    have = image_packages() | SKIP
    return {n: d for n, d in sorted(closure().items()) if n not in have}


def estimate(dists: dict[str, md.Distribution]) -> tuple[float, float]:
    """(installed MiB, xz -6 MiB) of these distributions' files here (Python 3.11 builds)."""
    raw, packed = 0, 0
    for dist in dists.values():
        for f in dist.files or []:
            if "__pycache__" in str(f):
                continue
            try:
                data = Path(f.locate()).read_bytes()
            except OSError:
                continue
            raw += len(data)
            packed += len(lzma.compress(data, preset=6))
    return raw / 2**20, packed / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimate", action="store_true")
    args = parser.parse_args()
    dists = missing()
    for name, dist in dists.items():
        print(f"{name}=={dist.version}")
    if args.estimate:
        raw, packed = estimate(dists)
        print(f"# {len(dists)} packages: {raw:.0f} MiB installed, about {packed:.0f} MiB as xz "
              f"(file by file; one archive compresses better)", file=sys.stderr)


if __name__ == "__main__":
    main()

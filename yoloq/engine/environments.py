"""Engines that live in their own virtual environment, and the one command that installs them.

YOLO-NAS is trained by super-gradients 3.7.1, whose pins (numpy<=1.23, protobuf==3.20.3,
onnx==1.15.0, onnxruntime==1.15.0, ...) cannot be satisfied beside ultralytics. It gets a
virtual environment of its own under `YOLOQ_ENGINES_DIR` (`yoloq engine install yolo-nas`),
and its segments run in that environment's Python (`yoloq.engine.yolonas`).

Installing: a fresh venv; torch and torchvision (with the CUDA libraries and triton that torch
pins exactly) are not installed a second time but linked from this environment into a folder
the engine's `sys.path` ends with (a `.pth` file): about 5.5 GB saved per host, and the engine
runs the very torch build the main environment runs. Then the engine's packages are resolved
through uv with `--override` for the pins no release satisfies on Python 3.11 (numpy 1.23.0 has
no cp311 wheel: 1.23.5 is used), the caps that keep numpy-dependent packages at releases that
still support numpy 1.23, and older onnxsim and tensorboard whose newer releases need packages
the pins exclude; what the resolution lists, less the linked distributions, is installed
without further resolution. The last step imports the engine with the network closed; the
`.installed` marker (the requirement lines' hash) is written only then, so a half-finished
install is never taken for a working one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from yoloq.base.errors import UserError
from yoloq.settings import settings

MARKER = ".installed"
SHARED = "shared-torch"  # the folder of links to this environment's torch
SHARED_PTH = "yoloq-shared-torch.pth"


@dataclass(frozen=True)
class EngineEnvironment:
    """One engine's virtual environment: what it installs and how it is checked."""

    name: str
    packages: tuple[str, ...]  # installed with uv, after torch
    overrides: tuple[str, ...]  # uv --override lines
    check: str  # Python run in the environment, offline, to prove it works
    why: str  # one line: why it cannot share the main environment

    @property
    def root(self) -> Path:
        return engines_dir() / self.name

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def requirement_lines(self) -> list[str]:
        return [*torch_pins(), f"shared from {_main_site_packages()}", *self.packages, "--", *self.overrides]

    def fingerprint(self) -> str:
        return hashlib.sha256("\n".join(self.requirement_lines()).encode()).hexdigest()[:16]

    def installed(self) -> bool:
        marker = self.root / MARKER
        shared = self.root / SHARED
        return (self.python.is_file() and marker.is_file()
                and marker.read_text().strip() == self.fingerprint()
                and shared.is_dir() and all(link.exists() for link in shared.iterdir()))


YOLO_NAS = EngineEnvironment(
    name="yolo-nas",
    packages=("super-gradients==3.7.1", "onnx-graphsurgeon==0.5.2"),
    overrides=(
        "numpy==1.23.5", "protobuf==3.20.3", "onnx==1.15.0", "onnxruntime==1.15.0", "setuptools<80",
        "coverage>=5.3.1", "scipy<1.12", "pandas<2.1", "matplotlib<3.9", "contourpy<1.3",
        "scikit-learn<1.4", "scikit-image<0.23", "pywavelets<1.6", "opencv-python<4.9",
        "opencv-python-headless<4.9", "albumentations<1.4", "onnxsim==0.4.36", "tensorboard<2.17",
    ),
    check="import super_gradients, torch; from super_gradients.training import models; "
          "models.get('yolo_nas_s', num_classes=2, pretrained_weights=None)",
    why="super-gradients 3.7.1 pins numpy<=1.23, protobuf==3.20.3 and onnx==1.15.0, which "
        "cannot live beside ultralytics",
)
ENVIRONMENTS = {YOLO_NAS.name: YOLO_NAS}


def engines_dir() -> Path:
    """`YOLOQ_ENGINES_DIR`, default ~/.local/share/yoloq/engines (one install per host)."""
    configured = settings().engines_dir
    return Path(configured).expanduser() if configured else Path.home() / ".local" / "share" / "yoloq" / "engines"


def environment(name: str, field: str = "engine") -> EngineEnvironment:
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise UserError(field, f"no engine environment {name!r}",
                        f"use one of {', '.join(ENVIRONMENTS)}") from None


def require(name: str, field: str = "model") -> Path:
    """The Python of an installed engine environment; a one-line refusal naming the install
    command when it is missing (admission calls this: no GPU time is spent on a missing engine)."""
    env = environment(name, field)
    if not env.installed():
        raise UserError(field, f"the {name} engine is not installed on this host ({env.root})",
                        f"run `yoloq engine install {name}` once (it needs the package registry; "
                        f"it has its own environment because {env.why})")
    return env.python


def torch_pins() -> list[str]:
    """torch and torchvision at the versions this environment runs (their local build tag
    dropped: pip matches `==2.14.1` against a `2.14.1+cu130` wheel)."""
    pins = []
    for package in ("torch", "torchvision"):
        try:
            pins.append(f"{package}=={metadata.version(package).split('+')[0]}")
        except metadata.PackageNotFoundError:
            raise UserError("engine", f"{package} is not installed in this environment",
                            "install yoloq with its dependencies first (`make install`)") from None
    return pins


def install(name: str, echo: Callable[[str], None] = print, force: bool = False) -> Path:
    """Create the engine's environment afresh (an old or half-finished one is removed first);
    returns its Python. Each step is echoed with its duration; a failing step raises UserError
    with the command and its last line."""
    env = environment(name)
    if env.installed() and not force:
        echo(f"{name}: already installed in {env.root}")
        return env.python
    if env.root.exists():
        echo(f"  remove the previous environment in {env.root}")
        shutil.rmtree(env.root)
    env.root.parent.mkdir(parents=True, exist_ok=True)
    _step(echo, "create the virtual environment", [sys.executable, "-m", "venv", str(env.root)])
    pip = [str(env.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _step(echo, "install uv (the resolver that takes overrides)", [*pip, "uv"])
    uv = str(env.root / "bin" / "uv")
    with tempfile.TemporaryDirectory() as scratch:
        overrides, wanted, resolved = (Path(scratch) / n for n in ("overrides.txt", "in.txt", "resolved.txt"))
        overrides.write_text("\n".join([*torch_pins(), *env.overrides]) + "\n")
        wanted.write_text("\n".join([*torch_pins(), *env.packages]) + "\n")
        _step(echo, f"resolve {', '.join(env.packages)} with {len(env.overrides)} overrides",
              [uv, "pip", "compile", "--python", str(env.python), "--no-header", "--no-annotate",
               "--quiet", str(wanted), "--override", str(overrides), "-o", str(resolved)])
        pins = _pins(resolved.read_text())
        linked = _link_shared(env, pins)
        echo(f"  linked {len(linked)} distributions from this environment (torch, torchvision, "
             f"the CUDA libraries): not installed a second time")
        resolved.write_text("".join(f"{n}=={v}\n" for n, v in pins.items() if n not in linked))
        _step(echo, f"install the {len(pins) - len(linked)} other resolved packages",
              [uv, "pip", "install", "--python", str(env.python), "--no-deps", "-r", str(resolved)])
    _step(echo, "import it with the network closed", [str(env.python), "-c", _offline(env.check)])
    (env.root / MARKER).write_text(env.fingerprint() + "\n")
    echo(f"{name}: installed in {env.root}")
    return env.python


def torch_closure() -> dict[str, metadata.Distribution]:
    """torch, torchvision and everything they require here (extras followed, markers
    evaluated), by normalised name: the distributions an engine may link."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str]]] = [("torch", frozenset()), ("torchvision", frozenset())]
    while todo:
        name, extras = todo.pop()
        name = canonicalize_name(name)
        if name not in found:
            try:
                found[name] = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                if name in ("torch", "torchvision"):
                    raise UserError("engine", f"{name} is not installed in this environment",
                                    "install yoloq with its dependencies first (`make install`)") from None
                continue  # a requirement this platform's install did not need
        for line in found[name].requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return found


def _link_shared(env: EngineEnvironment, pins: dict[str, str]) -> set[str]:
    """Link into the engine's SHARED folder every top-level entry (package, .libs, dist-info) of
    the torch closure's distributions that the engine's resolution pins at the very version this
    environment holds, and end the engine's sys.path with that folder. A distribution pinned at
    another version (numpy, pillow) is installed in the engine instead, and shadows nothing here."""
    shared = env.root / SHARED
    shared.mkdir()
    site = _main_site_packages()
    linked = {name: dist for name, dist in torch_closure().items() if pins.get(name) == dist.version}
    for dist in linked.values():
        for entry in {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            target = site / entry
            if target.exists() and not (shared / entry).exists():
                (shared / entry).symlink_to(target)
    (env.site_packages / SHARED_PTH).write_text(f"{shared}\n")
    return set(linked)


def _pins(resolved: str) -> dict[str, str]:
    """`name==version` lines of a uv resolution, by normalised name."""
    pins = {}
    for line in resolved.splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            if exact:
                pins[canonicalize_name(requirement.name)] = exact[0]
    return pins


@functools.cache
def _main_site_packages() -> Path:
    """Where this environment's torch lives (admission reads it through the fingerprint)."""
    return Path(metadata.distribution("torch").locate_file("")).resolve()


def _offline(code: str) -> str:
    """`code` run with every non-loopback connection refused (a download would fail loudly)."""
    return ("import socket\n_c = socket.socket.connect\n"
            "def _guard(self, address):\n"
            "    host = address[0] if isinstance(address, tuple) else str(address)\n"
            "    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ('127.0.0.1', '::1', 'localhost'):\n"
            "        raise OSError(f'offline: refused a connection to {host}')\n"
            "    return _c(self, address)\n"
            "socket.socket.connect = _guard\n" + code.replace("; ", "\n"))


def _step(echo: Callable[[str], None], what: str, command: list[str]) -> None:
    echo(f"  {what} ...")
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=engine_env())
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise UserError("engine install", f"{what} failed (exit {done.returncode}): {last[0][:300]}",
                        f"run it by hand to see all of it: {' '.join(command)[:300]}")
    echo(f"    done in {time.monotonic() - began:.0f} s")


def engine_env() -> dict[str, str]:
    """The environment an engine's processes run with: the caller's, offline, no crash
    handler or console hooks of super-gradients, unbuffered JSON lines."""
    env = dict(os.environ)
    env.update({"CRASH_HANDLER": "FALSE", "UPLOAD_LOGS": "FALSE", "DO_NOT_TRACK": "1",
                "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    env.pop("PYTHONPATH", None)  # the main environment's packages must not leak in
    return env

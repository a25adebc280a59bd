"""Keep other threads out of the training thread's Python `random` stream.

ultralytics draws its augmentations from Python's module-level `random`. In a
segment process other threads draw from it too, at moments that depend on timing:
websockets' keepalive pings (`random.getrandbits`) on Prefect's event connection,
retry jitter in HTTP clients. One such draw in the middle of an epoch changes
every augmentation after it, and a resumed job is no longer bit-identical to an
uninterrupted one. After `isolate()`, the module-level functions give the
training thread its own `random.Random`; every other thread keeps the original.
"""

from __future__ import annotations

import random
import threading

_FUNCTIONS = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle",
              "sample", "getrandbits", "gauss", "normalvariate", "lognormvariate",
              "expovariate", "vonmisesvariate", "gammavariate", "triangular", "betavariate",
              "paretovariate", "weibullvariate", "randbytes", "seed", "getstate", "setstate")
_installed: dict[str, object] = {}
_training: dict[str, object] = {}


def isolate() -> random.Random:
    """Route the calling thread's module-level `random` calls to a private generator.

    Idempotent; a later call moves the private generator to the calling thread.
    """
    _training["thread"] = threading.get_ident()
    rng = _training.setdefault("rng", random.Random())
    if not _installed:
        shared = random._inst  # the generator everyone else keeps using
        for name in _FUNCTIONS:
            if hasattr(shared, name):
                _installed[name] = getattr(random, name)
                setattr(random, name, _dispatch(name, shared))
    return rng  # type: ignore[return-value]


def restore() -> None:
    """Undo `isolate()` (for tests)."""
    for name, original in _installed.items():
        setattr(random, name, original)
    _installed.clear()
    _training.clear()


def _dispatch(name: str, shared: random.Random):
    def call(*args, **kwargs):
        owner = _training["rng"] if threading.get_ident() == _training.get("thread") else shared
        return getattr(owner, name)(*args, **kwargs)

    call.__name__ = name
    return call

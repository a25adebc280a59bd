"""One verified TLS context per process for Prefect's API clients.

Prefect builds a new `ssl.SSLContext` from certifi's CA bundle for every client it creates,
and its engine, task runs, log and event workers create many: py-spy measured 2.3 s of CPU
per segment (of about 13) and 9% of a core in the job runner spent parsing the bundle again.
A context that only verifies servers against a fixed CA file is safe to share (Python's
`SSLContext` is made to be shared across connections and threads), so the verified path of
Prefect's client gets one context per CA file. Only that call is cached: Prefect's
insecure-skip-verify path (which mutates its context) and every other library still get a
context of their own.
"""

from __future__ import annotations

import ssl
import threading
import types
from typing import Any

_LOCK = threading.Lock()
_SHARED: dict[str, ssl.SSLContext] = {}


def _create_default_context(purpose: Any = ssl.Purpose.SERVER_AUTH, *, cafile: str | None = None,
                            capath: str | None = None, cadata: Any = None) -> ssl.SSLContext:
    if purpose is not ssl.Purpose.SERVER_AUTH or cafile is None or capath or cadata:
        return ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)
    with _LOCK:
        if cafile not in _SHARED:
            _SHARED[cafile] = ssl.create_default_context(cafile=cafile)
        return _SHARED[cafile]


# Prefect modules that build a verified context per client (the API client, and the server
# version check the events client makes on connecting).
_CLIENT_MODULES = ("prefect.client.orchestration", "prefect._internal.version_checking")


def share_client_tls_context() -> None:
    """Point Prefect's client modules at an `ssl` whose verified contexts are shared, and build
    Prefect's own context now (a launcher does this before it forks: children inherit it).
    Idempotent. A module missing from another Prefect version is simply not patched."""
    import importlib

    for name in _CLIENT_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not getattr(module.ssl, "_yoloq_shared", False):
            module.ssl = _shim()
    _create_default_context(cafile=_prefect_cafile())


def _shim() -> Any:
    shim = types.SimpleNamespace(**{name: getattr(ssl, name) for name in dir(ssl)
                                    if not name.startswith("__")})
    shim.create_default_context = _create_default_context
    shim._yoloq_shared = True
    return shim


def _prefect_cafile() -> str:
    """The CA file Prefect's clients verify against: its setting, else certifi's bundle."""
    import certifi
    from prefect.settings import PREFECT_API_SSL_CERT_FILE

    return PREFECT_API_SSL_CERT_FILE.value() or certifi.where()

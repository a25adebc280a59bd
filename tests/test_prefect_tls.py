"""Prefect's API clients share one verified TLS context per process (yoloq.base.prefect_tls)."""

from __future__ import annotations

import ssl

import certifi
import prefect.client.orchestration as orchestration
from prefect.client.orchestration import PrefectClient, SyncPrefectClient

from yoloq.base import prefect_tls


def _context_of(client) -> ssl.SSLContext:
    return client._client._transport._pool._ssl_context


def test_clients_share_one_verified_context_and_nothing_else_does():
    prefect_tls.share_client_tls_context()
    prefect_tls.share_client_tls_context()  # idempotent
    url = "http://127.0.0.1:9/api"
    first, second = PrefectClient(url), SyncPrefectClient(url)
    assert _context_of(first) is _context_of(second)
    assert _context_of(first).verify_mode is ssl.CERT_REQUIRED
    [cafile] = prefect_tls._SHARED  # Prefect's CA file (its setting, else certifi's bundle)
    assert prefect_tls._SHARED[cafile] is _context_of(first)
    # the rest of the process is untouched: a context of its own, every time
    assert ssl.create_default_context(cafile=cafile) is not _context_of(first)
    # the events client's server-version check builds its context the same way
    import prefect._internal.version_checking as version_checking

    assert version_checking.ssl.create_default_context(cafile=cafile) is _context_of(first)


def test_an_unverified_context_is_never_shared():
    prefect_tls.share_client_tls_context()
    one = orchestration.ssl.create_default_context()  # Prefect's insecure path: no CA file
    two = orchestration.ssl.create_default_context()
    assert one is not two
    one.check_hostname = False
    one.verify_mode = ssl.CERT_NONE
    shared = orchestration.ssl.create_default_context(cafile=certifi.where())
    assert shared.verify_mode is ssl.CERT_REQUIRED and shared.check_hostname

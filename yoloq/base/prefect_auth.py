"""Credentials for the Prefect API itself (Prefect's own server auth: one shared `user:password`).

The cluster profile's server requires them (`PREFECT_SERVER_API_AUTH_STRING`), so a user cannot
go around the yoloq API by talking to Prefect; node agents, the job runner and the yoloq API
send them (`PREFECT_API_AUTH_STRING`). Users hold team tokens for the yoloq API, not these.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import MutableMapping

from yoloq.base.errors import UserError
from yoloq.settings import settings

CLIENT_ENV = "PREFECT_API_AUTH_STRING"
SERVER_ENV = "PREFECT_SERVER_API_AUTH_STRING"
_PROBE = "/admin/version"  # behind the auth check (only /health and /ready are open)
_ACCEPTED: set[tuple[str, str]] = set()  # (API URL, credentials) already accepted by this process


def cluster_profile(env: MutableMapping[str, str]) -> bool:
    return (settings().profile or env.get("PREFECT_PROFILE")) == "cluster"


def prepare_server_host(env: MutableMapping[str, str]) -> None:
    """For `yoloq up`: the cluster profile's server must require credentials, and the server
    host's own processes (runner, worker, yoloq API) send the same ones."""
    if not cluster_profile(env):
        return
    server, client = env.get(SERVER_ENV, ""), env.get(CLIENT_ENV, "")
    if ":" not in server:
        raise UserError(SERVER_ENV, "is not set (as user:password); the cluster profile's Prefect API "
                        "must require credentials", f"export {SERVER_ENV}=admin:$(openssl rand -hex 16) "
                        "on the server host (see docs/how-to/cluster.md)")
    if client and client != server:
        raise UserError(CLIENT_ENV, f"differs from {SERVER_ENV} on the server host",
                        f"unset {CLIENT_ENV} there (it defaults to {SERVER_ENV}) or make them equal")
    env[CLIENT_ENV] = server


def check_access(api_url: str, timeout_s: float = 5.0) -> None:
    """A one-line error when the Prefect API at `api_url` refuses this process's credentials
    (missing or wrong). A server without auth, or one that does not answer, passes here. Once
    accepted, the same URL and credentials are not asked again (the API server calls this often)."""
    seen = (api_url, client_auth())
    if seen in _ACCEPTED:
        return
    request = urllib.request.Request(api_url.rstrip("/") + _PROBE, headers=auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            _ACCEPTED.add(seen)
            return
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            return
    except OSError:
        return
    if not seen[1]:
        raise UserError(CLIENT_ENV, f"is not set, and the Prefect API at {api_url} requires credentials",
                        f"export {CLIENT_ENV}=user:password (the server's {SERVER_ENV}); users go "
                        "through the yoloq API instead: `yoloq login URL`")
    raise UserError(CLIENT_ENV, f"was refused by the Prefect API at {api_url} (401)",
                    f"set it to the server's {SERVER_ENV} (user:password)")


def client_auth() -> str:
    """The credentials this process's Prefect client sends (its settings: the environment, or a
    temporary setting)."""
    from prefect.settings import PREFECT_API_AUTH_STRING

    return PREFECT_API_AUTH_STRING.value() or ""


def auth_headers() -> dict[str, str]:
    """Prefect's own scheme: HTTP Basic with the base64 of the auth string."""
    auth = client_auth()
    if not auth:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}

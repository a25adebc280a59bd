"""A small client for the yoloq REST API (`/v1`), used by the CLI when a server is configured
(`yoloq login`, or `YOLOQ_SERVER` / `YOLOQ_TOKEN`). Every failure is one line naming the fix."""

from __future__ import annotations

from typing import Any

import httpx
from typing_extensions import Self

from yoloq.client.credentials import Server
from yoloq.base.errors import UserError, one_line

TIMEOUT_S = 120.0  # a busy server (first MLflow use, a loaded host) can take tens of seconds
CONNECT_TIMEOUT_S = 10.0


class Remote:
    """Bearer-token HTTP calls to one yoloq server; JSON in, JSON out."""

    def __init__(self, server: Server, timeout_s: float = TIMEOUT_S, headers: dict[str, str] | None = None) -> None:
        self.server = server
        self._http = httpx.Client(base_url=f"{server.url}/v1",
                                  timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
                                  headers={"Authorization": f"Bearer {server.token}", **(headers or {})})

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.call("POST", path, json=body, headers=headers)

    def delete(self, path: str, **params: Any) -> Any:
        return self.call("DELETE", path, params={k: v for k, v in params.items() if v is not None})

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ReadTimeout:
            raise UserError("server", f"{self.server.url} did not answer {method} /v1{path} within "
                            f"{self._http.timeout.read:g} s", "try again; if it persists, see the server's "
                            "api.log") from None
        except httpx.TransportError as exc:
            raise UserError("server", f"no yoloq server answers on {self.server.url} "
                            f"({type(exc).__name__}; from {self.server.source})",
                            "check the URL and that `yoloq up` runs there, or `yoloq login URL` "
                            "again") from None
        if response.status_code >= 400:
            raise http_error(response, self.server)
        return response.json() if response.content else None


def http_error(response: httpx.Response, server: Server) -> UserError:
    """One line for a refused request: the server's own field, problem and fix, the very line the
    CLI prints for the same mistake (no HTTP status in it); a 401 names `yoloq login` as the fix.
    Only a body that is not yoloq's (a proxy, an unknown route) is shown with its status."""
    status, detail = response.status_code, _detail(response)
    if status == 401:
        return UserError("token", f"{server.url} refused the token from {server.source}: "
                         f"{detail.get('problem', detail['message'])}",
                         f"run `yoloq login {server.url} --token TOKEN` with a current team token "
                         "(`yoloq team add|rotate` on the server prints one)")
    if "field" in detail:
        return UserError(detail["field"], detail["problem"], detail.get("fix"))
    return UserError("server", f"{server.url} answered {status}: {detail['message']}",
                     "fix the request as the message says" if status < 500 else "see the server's log")


def _detail(response: httpx.Response) -> dict[str, Any]:
    """The server's refusal: yoloq's `{"field", "problem", "fix", "message"}`, else FastAPI's
    validation list or any body, as `{"message": ...}`."""
    try:
        body = response.json()
    except ValueError:
        return {"message": one_line(response.text[:300]) or response.reason_phrase}
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, dict) and "problem" in detail:
        return {k: one_line(str(v)) if v is not None else None for k, v in detail.items()}
    if isinstance(detail, list):  # FastAPI validation errors: loc + msg per field
        return {"message": "; ".join(_field_error(item) for item in detail[:5])}
    return {"message": one_line(str(detail))}


def _field_error(item: Any) -> str:
    if not isinstance(item, dict):
        return one_line(str(item))
    loc = ".".join(str(p) for p in item.get("loc", []) if p not in ("body",))
    return one_line(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg", item)))


def remote() -> Remote | None:
    """A client for the configured server, or None when the commands should stay local."""
    from yoloq.client.credentials import configured_server

    server = configured_server()
    return Remote(server) if server is not None else None

"""What every request passes before a route sees it: the token, then the body's size.

FastAPI parses a route's body before it solves the route's dependencies, so a malformed body
with no token would get 422 from the parser. This ASGI middleware checks the token of every
`/v1` route (but `/v1/health`) first and hands the caller on to `yoloq.api.auth.caller`.

The body limit (`MAX_BODY_BYTES`) is enforced without reading a large body: a declared
`Content-Length` over it is refused at once, and a chunked body is counted as the route
reads it, the read stopping at the first chunk past the limit (413 in both cases).
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yoloq.api.errors import error_response

MAX_BODY_BYTES = 1024 * 1024  # 1 MiB, the default of YOLOQ_API_MAX_BODY_BYTES: a spec is a few hundred bytes
OPEN_PATHS = frozenset({"/v1/health"})


def needs_token(path: str) -> bool:
    return path.startswith("/v1/") and path.rstrip("/") not in OPEN_PATHS


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=too_large_body(limit))


def too_large_body(limit: int) -> dict[str, Any]:
    from yoloq.api.errors import error_body
    from yoloq.base.errors import UserError

    return error_body(UserError("body", f"larger than the limit of {limit} bytes",
                                "send a smaller body (a job spec is a few hundred bytes)"))


class RequestGuard:
    """Token first (401/403 before any body is read), then the body limit (413)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if needs_token(scope["path"]):
            refused = await self._authenticate(scope, headers)
            if refused is not None:
                await refused(scope, receive, send)
                return
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await error_response(413, **_fields(too_large_body(self.limit)),
                                 headers={"Connection": "close"})(scope, receive, send)
            return
        await self.app(scope, _counted(receive, self.limit), send)

    async def _authenticate(self, scope: Scope, headers: Headers) -> Any:
        """None with the caller stored in the request state, or the refusal to send."""
        from yoloq.api.auth import CALLER_KEY, check_token
        from yoloq.client.local_stack import USER_HEADER

        try:
            who = await run_in_threadpool(check_token, headers.get("authorization"), headers.get(USER_HEADER))
        except HTTPException as exc:
            return error_response(exc.status_code, **_fields(exc.detail), headers=exc.headers)
        scope.setdefault("state", {})[CALLER_KEY] = who
        return None


def _fields(detail: dict[str, Any]) -> dict[str, Any]:
    return {"field": detail["field"], "problem": detail["problem"], "fix": detail["fix"]}


def _counted(receive: Receive, limit: int) -> Receive:
    """`receive`, refusing (413) the chunk that takes the body past `limit`."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return counted

"""API errors: every refusal is `{"detail": {"field", "problem", "fix", "message"}}`, where
`message` is the very line the CLI prints after `error: ` for the same mistake.

The handlers here put FastAPI's own refusals in that shape too: a body that does not parse or
has the wrong types (`RequestValidationError`, 422), an HTTP error raised by the framework
(404 no route, 405 wrong method, 413 body too large) and an unexpected exception (500; the
traceback goes to the server's log, never to the client).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from yoloq.base.errors import UserError

SHAPE_KEYS = ("field", "problem", "fix", "message")
_LOG = logging.getLogger("yoloq.api.errors")


def error_body(exc: UserError) -> dict[str, Any]:
    return {"field": exc.field, "problem": exc.problem, "fix": exc.fix, "message": exc.line()}


def refuse(status: int, field: str, problem: str, fix: str | None = None,
           headers: dict[str, str] | None = None) -> HTTPException:
    """An HTTPException with the one-line error body (raise it)."""
    return HTTPException(status, detail=error_body(UserError(field, problem, fix)), headers=headers)


def refuse_error(status: int, exc: UserError) -> HTTPException:
    return HTTPException(status, detail=error_body(exc))


def error_response(status: int, field: str, problem: str, fix: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The error shape as a response (for middleware and handlers, which cannot raise)."""
    body = error_body(UserError(field, problem, fix))
    return JSONResponse(status_code=status, content={"detail": body}, headers=headers)


def validation_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """FastAPI's list of validation errors as one error: the first one's dotted location and
    message, and how many more there are (each names its own field once the first is fixed)."""
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
    field = dotted(first.get("loc", ()))
    problem = _problem(first)
    if len(errors) > 1:
        others = ", ".join(dotted(e.get("loc", ())) for e in errors[1:4])
        problem += f" (and {len(errors) - 1} more: {others}{', ...' if len(errors) > 4 else ''})"
    return error_body(UserError(field, problem, _fix(first)))


def dotted(loc: Any) -> str:
    """`("body", "train_args", "seed")` -> `train_args.seed`; a query or header keeps its kind
    (`query.limit`); a body that is not JSON is `body`."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body" and len(parts) > 1 and not parts[1].isdigit():
        parts = parts[1:]
    elif parts and parts[0] == "body":
        parts = ["body"]
    return ".".join(parts) or "request"


def _problem(error: dict[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        detail = (error.get("ctx") or {}).get("error") or "JSON decode error"
        return f"not valid JSON ({detail} at character {_position(error)})"
    return str(error.get("msg") or "invalid value")


def _position(error: dict[str, Any]) -> str:
    loc = list(error.get("loc", ()))
    return str(loc[1]) if len(loc) > 1 else "?"


_FIXES = {
    "json_invalid": "send one JSON object with `Content-Type: application/json`",
    "missing": "add the field",
    "model_attributes_type": "send a JSON object",
    "dict_type": "send a JSON object",
    "int_parsing": "send a whole number",
    "int_type": "send a whole number",
    "float_parsing": "send a number",
    "float_type": "send a number",
    "bool_parsing": "send true or false",
    "bool_type": "send true or false",
    "string_type": "send a string",
    "list_type": "send a JSON list",
    "literal_error": "use one of the values the message lists",
    "datetime_parsing": "send an ISO 8601 time, e.g. 2026-12-04T20:00:00Z",
    "datetime_from_date_parsing": "send an ISO 8601 time, e.g. 2026-12-04T20:00:00Z",
    "greater_than": "send a larger value",
    "extra_forbidden": "remove the field",
}


def _fix(error: dict[str, Any]) -> str | None:
    return _FIXES.get(str(error.get("type", "")))


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 for a body, query or header FastAPI could not read, in the one shape."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(status_code=422, content={"detail": validation_body(list(exc.errors()))})


def http_error_body(request: Request, exc: StarletteHTTPException) -> dict[str, Any]:
    """The shape for an HTTP error: a route's own refusal as it is, the framework's named."""
    if isinstance(exc.detail, dict) and set(SHAPE_KEYS) <= set(exc.detail):
        return exc.detail
    method, path = request.method, request.url.path
    if exc.status_code == 404 and exc.detail == "Not Found":
        return error_body(UserError("path", f"no route {method} {path}",
                                    "see /docs for the API's routes"))
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("allow") or (exc.headers or {}).get("Allow") or ""
        return error_body(UserError("method", f"{method} is not allowed on {path}",
                                    f"use {allowed}" if allowed else "see /docs for the API's routes"))
    field = {401: "token", 403: "token", 413: "body"}.get(exc.status_code, "request")
    return error_body(UserError(field, str(exc.detail), None))


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(status_code=exc.status_code, content={"detail": http_error_body(request, exc)},
                        headers=exc.headers)


async def server_error(request: Request, exc: Exception) -> JSONResponse:
    """500 in the one shape; Starlette logs the traceback after this answer."""
    _LOG.error("%s %s failed: %s: %s", request.method, request.url.path, exc.__class__.__name__, exc)
    return error_response(500, "server", f"internal error ({exc.__class__.__name__})",
                          "retry; if it persists, see the yoloq API server's log")

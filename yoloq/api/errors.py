"""API errors: every refusal is `{"detail": {"field", "problem", "fix", "message"}}`, where
`message` is the very line the CLI prints after `error: ` for the same mistake."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from yoloq.base.errors import UserError


def error_body(exc: UserError) -> dict[str, Any]:
    return {"field": exc.field, "problem": exc.problem, "fix": exc.fix, "message": exc.line()}


def refuse(status: int, field: str, problem: str, fix: str | None = None,
           headers: dict[str, str] | None = None) -> HTTPException:
    """An HTTPException with the one-line error body (raise it)."""
    return HTTPException(status, detail=error_body(UserError(field, problem, fix)), headers=headers)


def refuse_error(status: int, exc: UserError) -> HTTPException:
    return HTTPException(status, detail=error_body(exc))

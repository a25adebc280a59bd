"""Who is calling: `Authorization: Bearer <token>`, checked against the team store.

`caller` is the FastAPI dependency every `/v1` route takes (401 for a missing, unknown or
rotated token; `yoloq.api.guard` runs the same `check_token` before any body is read); `require_team` refuses (403) an action on another team's behalf; `admin`
is the dependency of the admin routes (403 for a team token). `caller_from_token` is the
same check for other front doors (the web page's login cookie). The host's own CLI may instead
present the stack's operator secret (`yoloq.client.local_stack`): an admin that acts for the OS
user it names, as a local command would.
"""

from __future__ import annotations

import hmac
import threading
from typing import Annotated

from fastapi import Depends, Header, Request

from yoloq.api.errors import refuse
from yoloq.client.local_stack import USER_HEADER
from yoloq.records.teams import LOCAL_OPERATOR, Caller, TeamStore

__all__ = ["Admin", "Authed", "Caller", "admin", "caller", "caller_from_token", "check_token", "require_team", "team_store"]

_STORE: TeamStore | None = None
_STORE_LOCK = threading.Lock()
_OPERATOR_SECRET: str | None = None  # set by `python -m yoloq.api` when it publishes the secret
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
CALLER_KEY = "yoloq_caller"  # where `yoloq.api.guard` leaves the caller in the request's state


def team_store() -> TeamStore:
    """This process's team store (`<state>/teams.json`), opened once."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            _STORE = TeamStore()
        return _STORE


def accept_operator(secret: str) -> None:
    """This process accepts `secret` as the local operator's token."""
    global _OPERATOR_SECRET
    _OPERATOR_SECRET = secret


def caller_from_token(token: str | None, user: str | None = None) -> Caller | None:
    """The caller a plain token belongs to, or None; `user` names the local operator's OS user."""
    if token and _OPERATOR_SECRET and hmac.compare_digest(token, _OPERATOR_SECRET):
        return Caller(LOCAL_OPERATOR, "cli", admin=True, user=(user or "").strip() or "operator")
    return team_store().caller(token)


def caller(request: Request,
           authorization: str | None = Header(default=None, description="Bearer <team token>"),
           x_yoloq_user: str | None = Header(default=None, alias=USER_HEADER, include_in_schema=False),
           ) -> Caller:
    """The authenticated caller of this request (401 when the token is missing or not valid):
    the one `yoloq.api.guard` found before the body was read, or checked here."""
    found = request.scope.get("state", {}).get(CALLER_KEY)
    if isinstance(found, Caller):
        return found
    return check_token(authorization, x_yoloq_user)


def check_token(authorization: str | None, user: str | None = None) -> Caller:
    """The caller an `Authorization` header names; HTTP 401 (in the error shape) otherwise."""
    if not authorization:
        raise refuse(401, "token", "missing: the request has no Authorization header",
                     "send `Authorization: Bearer <token>` (a token from `yoloq team add`)", _CHALLENGE)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise refuse(401, "token", "the Authorization header is not `Bearer <token>`",
                     "send `Authorization: Bearer <token>`", _CHALLENGE)
    found = caller_from_token(token.strip(), user)
    if found is None:
        raise refuse(401, "token", "unknown, removed or rotated token",
                     "ask an admin for the current token (`yoloq team rotate TEAM`)", _CHALLENGE)
    return found


def require_team(who: Caller, team: str) -> None:
    """403 unless the caller is that team (or an admin)."""
    if not who.admin and who.team != team:
        raise refuse(403, "team", f"this token belongs to team {who.team!r}, not {team!r}",
                     f"use {team!r}'s own token, or act for team {who.team!r}")


def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
    """The caller, who must hold an admin token (403 otherwise)."""
    if not who.admin:
        raise refuse(403, "token", f"team {who.team!r} has no admin rights",
                     "use an admin token (`yoloq team add NAME --admin`)")
    return who


Authed = Annotated[Caller, Depends(caller)]
"""A route parameter `who: Authed` is the authenticated caller."""
Admin = Annotated[Caller, Depends(admin)]
"""A route parameter `who: Admin` is an authenticated admin."""

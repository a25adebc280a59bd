"""The queue web page, served at `/` by the yoloq API server: the queue, a job's timeline and
metric curves, usage against quota, and the rules in force. Server-rendered HTML (Jinja2),
SVG pictures drawn on the server and one small script (`static/app.js`) that refreshes the
queue; nothing is loaded from outside this server.

Login: a form posting a team token, checked by `yoloq.api.auth.caller_from_token`, sets an
HttpOnly, SameSite=Strict cookie; every page needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from yoloq.api import web_data, web_svg

COOKIE = "yoloq_session"
_HERE = Path(__file__).parent
_STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
templates = Jinja2Templates(directory=str(_HERE / "templates"))
templates.env.filters["tu"] = web_svg.format_tu  # one TU format for the chart and the tables
router = APIRouter(include_in_schema=False)


def page_caller(request: Request) -> Any:
    """The logged-in caller from the session cookie, or None."""
    from yoloq.api.auth import caller_from_token

    token = request.cookies.get(COOKIE)
    return caller_from_token(token) if token else None


def _render(request: Request, name: str, caller: Any, **context: Any) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, {"caller": caller, **context})
    response.headers["Content-Security-Policy"] = _CSP
    response.headers["Cache-Control"] = "no-store"
    return response


def _to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def _client() -> Any:
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    return _render(request, "login.html", None, title="Log in", page="login", error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    """The form posts `token` url-encoded (read here: no multipart dependency)."""
    from starlette.concurrency import run_in_threadpool

    from yoloq.api.auth import caller_from_token

    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0]
    caller = await run_in_threadpool(caller_from_token, token.strip()) if token.strip() else None
    if caller is None:
        response = _render(request, "login.html", None, title="Log in", page="login",
                           error="That token is not valid (wrong, rotated or removed).")
        response.status_code = 401
        return response
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https", max_age=12 * 3600)
    return response


@router.post("/logout")
def logout() -> Response:
    response = _to_login()
    response.delete_cookie(COOKIE, path="/")
    return response


def _page(request: Request, name: str, title: str, build: Callable[[], dict[str, Any]]) -> Response:
    """A logged-in page: the login form for a visitor without a valid session cookie."""
    caller = page_caller(request)
    if caller is None:
        return _to_login()
    return _render(request, name, caller, title=title, page=name.removesuffix(".html"), **build())


@router.get("/", response_class=HTMLResponse)
def queue_page(request: Request) -> Response:
    now = time.time()
    return _page(request, "queue.html", "Queue", lambda: {
        "rows": _queue_rows(), "now": now, "now_text": web_data.iso(now)})


@router.get("/fragments/queue", response_class=HTMLResponse)
def queue_fragment(request: Request) -> Response:
    caller = page_caller(request)
    if caller is None:
        raise HTTPException(401, "log in first")
    return _render(request, "queue_rows.html", caller, rows=_queue_rows())


def _queue_rows() -> list[dict[str, Any]]:
    with _client() as client:
        rows = web_data.queue(client)
    for row in rows:
        row["eta_low_text"] = web_data.iso(row.get("eta_low"))
        row["eta_high_text"] = web_data.iso(row.get("eta_high"))
    return rows


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> Response:
    caller = page_caller(request)
    if caller is None:
        return _to_login()
    with _client() as client:
        page = web_data.job_page(client, job_id)
    if page is None:
        return not_found(request, f"There is no job named “{job_id}”.")
    return _render(request, "job.html", caller, title=f"Job {job_id}", page="job", **_job_context(page))


def wants_page(request: Request) -> bool:
    """A browser asking for a page (not the API, metrics or a script)."""
    path = request.url.path
    return (not path.startswith(("/v1/", "/metrics", "/static/", "/fragments/", "/docs", "/openapi"))
            and "text/html" in request.headers.get("accept", ""))


def not_found(request: Request, message: str) -> HTMLResponse:
    """A 404 page with the reason and a way back to the queue."""
    response = _render(request, "not_found.html", page_caller(request), title="Not found",
                       page="not_found", message=message)
    response.status_code = 404
    return response


def _job_context(page: web_data.JobPage) -> dict[str, Any]:
    curves = [web_svg.curve_svg(name, points)
              for name, points in (page.mlflow.get("curves") or {}).items()]
    return {"job": page.job, "timeline": page.timeline, "mlflow": page.mlflow, "curves": curves,
            "timeline_svg": web_svg.timeline_svg(page.bars)}


@router.get("/usage", response_class=HTMLResponse)
def usage_page(request: Request) -> Response:
    def build() -> dict[str, Any]:
        with _client() as client:
            rows = web_data.usage(client)
        return {"rows": rows, "chart": web_svg.usage_svg(rows)}

    return _page(request, "usage.html", "Usage", build)


@router.get("/rules", response_class=HTMLResponse)
def rules_page(request: Request) -> Response:
    def build() -> dict[str, Any]:
        rules = web_data.rules()
        return {"r": rules, "teams": sorted(set(rules["weights"]) | set(rules["quotas"])
                                            | set(rules["tier_caps"]))}

    return _page(request, "rules.html", "Rules", build)


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in _STATIC:
        raise HTTPException(404, "no such file")
    return FileResponse(_HERE / "static" / name, media_type=_STATIC[name],
                        headers={"Cache-Control": "no-cache"})

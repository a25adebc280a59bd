"""The API application: `create_app()` builds the FastAPI app with every router.

Routers live in their own modules (`jobs`, `cluster`, `teams_routes`, and the web page,
metrics and logs of the other front doors); each is included here in one line.
OpenAPI docs at `/docs`, the schema at `/openapi.json`, a health check at `/v1/health`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from yoloq import __version__
from yoloq.api import errors
from yoloq.api.errors import error_body
from yoloq.api.guard import RequestGuard
from yoloq.base.errors import UserError


def create_app(max_body_bytes: int | None = None) -> FastAPI:
    """Every error the app returns has the one shape of `yoloq.api.errors` (the web page's
    own pages answer a browser in HTML); the token is checked before any body is read and a
    body over `max_body_bytes` (default: `YOLOQ_API_MAX_BODY_BYTES`) is refused (413), both by
    `yoloq.api.guard`."""
    from yoloq.settings import settings

    from yoloq.base.prefect_tls import share_client_tls_context

    share_client_tls_context()
    from yoloq.api import cluster, jobs, teams_routes

    app = FastAPI(title="yoloq", version=__version__, docs_url="/docs", openapi_url="/openapi.json",
                  description="A fair, preemptive training queue for YOLO models on shared GPUs. "
                              "Every /v1 route but /v1/health takes `Authorization: Bearer <team token>`.")
    app.add_exception_handler(UserError, _user_error)
    app.add_exception_handler(RequestValidationError, errors.validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, errors.server_error)
    limit = max_body_bytes if max_body_bytes is not None else settings().api_max_body_bytes
    app.add_middleware(RequestGuard, max_body_bytes=limit)
    app.add_api_route("/v1/health", health, methods=["GET"], tags=["meta"])
    app.include_router(jobs.router, prefix="/v1")
    app.include_router(cluster.router, prefix="/v1")
    app.include_router(teams_routes.router, prefix="/v1")
    from yoloq.api import policy_routes  # PUT /v1/policy (admin)
    app.include_router(policy_routes.router, prefix="/v1")
    # Other front doors (web page, /metrics, logs) add their include_router lines below.
    from yoloq.api import metrics, web

    app.include_router(web.router)
    app.include_router(metrics.router)
    from yoloq.api import logs

    app.include_router(logs.router, prefix="/v1")  # job logs and the audit log
    return app


def health() -> dict[str, str]:
    """Liveness, no token needed (the stack's `up` waits for it)."""
    return {"status": "ok", "version": __version__}


async def _user_error(request: Request, exc: Exception) -> JSONResponse:
    """A bad value the route did not classify: 422 with the CLI's one-line message (503 when
    the stack behind the API does not answer: the request was fine)."""
    assert isinstance(exc, UserError)
    status = 503 if exc.field == "stack" else 422
    return JSONResponse(status_code=status, content={"detail": error_body(exc)})


async def _http_error(request: Request, exc: Exception) -> Response:
    """A browser's page that is not there gets an HTML page; everything else the JSON shape."""
    from yoloq.api import web

    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404 and web.wants_page(request):
        return web.not_found(request, errors.http_error_body(request, exc)["problem"])
    return await errors.http_error(request, exc)

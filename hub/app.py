"""The application factory: ``create_app(settings)`` wires routers, middleware and error handling."""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hub import __version__
from hub.core import Hub
from hub.errors import HubError
from hub.logs import setup_logging
from hub.settings import Settings

log = logging.getLogger("hub")


SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


class _TooLarge(Exception):
    pass


class LimitsAndLogs:
    """Pure ASGI middleware: request-size limit (413) and one structured log line per request.

    The log line carries method, path, status, duration and client address - never headers, query
    strings or bodies, so tokens cannot leak into logs.
    """

    def __init__(self, app: ASGIApp, max_request_bytes: int, max_json_bytes: int | None = None) -> None:
        self.app = app
        self.max_request = max_request_bytes
        self.max_json = min(max_json_bytes or max_request_bytes, max_request_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 0}
        head = scope.get("method") == "HEAD"
        if head:
            # HEAD answers exactly like GET, without the body (pages, API and index alike); handlers see
            # ``vf_head`` to skip side effects such as counting a download.
            scope = {**scope, "method": "GET", "vf_head": True}
        limit = self.max_request
        for k, v in scope.get("headers", []):
            if k == b"content-type" and b"json" in v.lower():
                limit = self.max_json  # JSON bodies are small; uploads are multipart
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > limit
                except ValueError:
                    too_big = True
                if too_big:
                    await self._reject(send, status)
                    self._log(scope, status["code"], start)
                    return
        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _TooLarge()
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if exceeded:
                # Whatever the app made of the truncated body (a parse error, ...), the answer is 413.
                if not started:
                    started = True
                    await self._reject(send, status)
                return
            if msg["type"] == "http.response.start":
                started = True
                status["code"] = msg["status"]
                msg["headers"] = [*msg.get("headers", []), *SECURITY_HEADERS]
            elif head and msg["type"] == "http.response.body":
                msg = {**msg, "body": b""}
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            pass
        finally:
            if exceeded and not started:
                await self._reject(send, status)
            self._log(scope, status["code"], start)

    async def _reject(self, send: Send, status: dict[str, int]) -> None:
        status["code"] = 413
        body = b'{"detail":"request body too large"}'
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _log(self, scope: Scope, code: int, start: float) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        client = scope.get("client")
        # The record is made here and handed to the logger directly: ``log.info`` would first walk the
        # stack to find its caller (``findCaller``), a good part of the cost of this line, which every
        # request pays (the access line names no source line anyway).
        record = log.makeRecord(
            log.name,
            logging.INFO,
            __file__,
            0,
            "request",
            (),
            None,
            extra={
                "method": "HEAD" if scope.get("vf_head") else scope.get("method"),
                "path": scope.get("path"),
                "status": code,
                "ms": round((time.perf_counter() - start) * 1000, 2),
                "client": client[0] if client else None,
            },
        )
        log.handle(record)


def _statement_timeout(exc: BaseException) -> bool:
    """A PostgreSQL statement cancelled by ``statement_timeout`` (SQLSTATE 57014)."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) == "57014"


def _wants_html(request: Request) -> bool:
    path = request.url.path
    if path.startswith(("/api/", "/simple", "/files/", "/legacy")) or "/simple/" in path:
        return False
    return "text/html" in request.headers.get("accept", "")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the hub. Migrations run here unless ``settings.migrate_on_start`` is off."""
    settings = settings or Settings()
    setup_logging(settings.log_level, settings.log_json)
    hub = Hub(settings)
    hub.blobs.claim_storage()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        hub.close()

    app = FastAPI(
        title="Environments Hub",
        version=__version__,
        description=(
            "Stores, versions and serves environment packages: a PEP 503/691/700 package index at "
            "`/simple/` (and `/{owner}/simple/`), a JSON API under `/api/v1`, the PyPI legacy upload API at "
            "`/legacy/` (twine, uv publish) and web pages. Authenticate with `Authorization: Bearer TOKEN` "
            "or HTTP Basic with the token as password."
        ),
        lifespan=lifespan,
        # /docs is served below with Swagger UI's files from the `swagger-ui-py` wheel, so the API
        # reference works offline (FastAPI's default page loads them from a CDN).
        docs_url=None,
        redoc_url=None,
    )
    app.state.hub = hub

    @app.exception_handler(HubError)
    async def hub_error(request: Request, exc: HubError) -> Response:
        if _wants_html(request) and exc.status in (401, 403, 404, 409, 413, 429):
            from hub.web import error_page

            resp = error_page(request, exc.status, exc.message)
            resp.headers.update({k: v for k, v in exc.headers.items() if k != "WWW-Authenticate"})
            return resp
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if _wants_html(request) and exc.status_code == 404:
            from hub.web import error_page

            return error_page(request, 404, "Not found")
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> Response:
        errors: list[dict[str, Any]] = []
        for e in exc.errors():
            errors.append(
                {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            )
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if _statement_timeout(exc):
            return JSONResponse(
                {"detail": "the database took too long to answer this request; narrow it and retry"},
                status_code=503,
                headers={"Retry-After": "5"},
            )
        err_id = uuid.uuid4().hex[:12]
        # The type, the SQLSTATE and the stack only: an exception's message can quote request data (a
        # database error quotes the offending value), and request data never reaches the logs.
        log.error(
            "unhandled error",
            extra={
                "error_id": err_id,
                "path": request.url.path,
                "error": type(exc).__name__,
                "sqlstate": getattr(getattr(exc, "orig", None), "sqlstate", None),
                "stack": "".join(traceback.format_tb(exc.__traceback__)),
            },
        )
        return JSONResponse({"detail": "internal error", "error_id": err_id}, status_code=500)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, Any]:
        """Liveness and readiness: the database answers."""
        with hub.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return {
            "status": "ok",
            "version": __version__,
            "database": hub.db.engine.dialect.name,
            "storage": settings.storage,
        }

    from hub import api, index, legacy, web

    _add_docs(app)
    # The index first: routes are matched in order, and a request for /simple/NAME/ that had to be
    # tried against every API route first spent half its time on the event loop in matching (measured
    # with cProfile). No index path can match an API path (their second segment is "simple" or a
    # file's hash prefix, the API's is "v1"), so the order changes nothing else.
    app.include_router(index.router)
    app.include_router(api.router)
    app.include_router(legacy.router)
    app.mount("/static", StaticFiles(directory=str(Path(__file__).parent / "static")), name="static")
    app.include_router(web.router)
    # Inside LimitsAndLogs (added last, so outermost): cached index pages are logged and given the
    # security headers like every other answer.
    app.add_middleware(index.CachedIndexPages)
    app.add_middleware(
        LimitsAndLogs, max_request_bytes=settings.max_request_bytes, max_json_bytes=settings.max_json_bytes
    )
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory hub.app:create_app_from_env`` (settings from VF_HUB_* variables)."""
    return create_app(Settings())


def _add_docs(app: FastAPI) -> None:
    """OpenAPI docs at ``/docs`` with locally served Swagger UI assets (no CDN, works offline)."""
    import importlib.util

    from fastapi.openapi.docs import get_swagger_ui_html

    # The `swagger-ui-py` wheel ships Swagger UI 5 (OpenAPI 3.1, which FastAPI emits) as static files;
    # only its folder is used, its framework glue is not imported.
    spec = importlib.util.find_spec("swagger_ui")
    assert spec is not None and spec.origin is not None, "swagger-ui-py is a dependency of the hub extra"
    assets = Path(spec.origin).parent / "static"
    app.mount("/_docs-assets", StaticFiles(directory=str(assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> Response:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}/_docs-assets/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/_docs-assets/swagger-ui.css",
            swagger_favicon_url=f"{root}/_docs-assets/favicon-32x32.png",
        )

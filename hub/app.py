"""The application factory: ``create_app(settings)`` wires routers, middleware and error handling."""

from __future__ import annotations

import asyncio
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
from starlette.concurrency import run_in_threadpool
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


class _Refused(Exception):
    """Raised from ``receive`` (or ``send``) to stop the app; the middleware answers for it."""


def is_upload_route(method: str, path: str) -> bool:
    """The two routes that take big bodies: ``POST /api/v1/environments/{owner}/{name}/versions`` and
    ``POST /legacy/``. Every other body is small, whatever its ``Content-Type`` (a test pins this list
    against the multipart routes of the OpenAPI document)."""
    if method != "POST":
        return False
    if path == "/legacy/":
        return True
    parts = path.split("/")
    return len(parts) == 7 and parts[1:4] == ["api", "v1", "environments"] and parts[6] == "versions"


def needs_credentials(method: str, path: str) -> bool:
    """A body sent to these routes is read only once its sender is known: every write of the API and
    /legacy/ needs a token (sign-in and sign-out forms are the anonymous bodies, and they are small)."""
    return method not in ("GET", "HEAD", "OPTIONS") and (path.startswith("/api/") or path == "/legacy/")


def _authenticate(scope: Scope) -> bool:
    """Whether the request's credentials name a principal (cached in the scope for the route's own
    dependency, which applies its scope rules); raises HubError (401, 429) as the route would."""
    from hub.http import principal_of

    return principal_of(Request(scope), allow_worker=True) is not None


class LimitsAndLogs:
    """Pure ASGI middleware: request-body bounds and timeouts, HEAD, security headers, and one
    structured log line per request.

    Bodies: the upload routes take ``max_request_bytes``, every other route ``max_body_bytes``,
    whatever ``Content-Type`` says; a declared length past the bound is 413 before a byte is read, a
    chunked body is counted as it arrives. On the routes that need credentials they are checked before
    the app may read a byte (401 at once). A body must arrive within ``body_timeout_seconds`` plus one
    second per ``body_min_bytes_per_second`` delivered (408 otherwise). A response the client stops
    reading for ``send_timeout_seconds`` is dropped. Every refusal closes the connection.

    Cost on a request without a body (the index, pages, downloads): one pass over the headers and one
    wrapped ``send``; no task, no timer, no thread (timers only while a body is read or a streamed
    response waits on its client).

    The log line carries method, path, status, duration and client address - never headers, query
    strings or bodies, so tokens cannot leak into logs.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.max_upload = settings.max_request_bytes
        self.max_body = min(settings.max_body_bytes, settings.max_request_bytes)
        self.body_grace = settings.body_timeout_seconds
        self.body_rate = float(settings.body_min_bytes_per_second)
        self.send_timeout = settings.send_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 0}
        method = scope["method"]
        head = method == "HEAD"
        if head:
            # HEAD answers exactly like GET, without the body (pages, API and index alike); handlers see
            # ``vf_head`` to skip side effects such as counting a download or opening a file.
            scope = {**scope, "method": "GET", "vf_head": True}
            method = "GET"
        length: bytes | None = None
        chunked = has_auth = False
        for k, v in scope["headers"]:
            if k == b"content-length":
                length = v
            elif k == b"transfer-encoding":
                chunked = True
            elif k == b"authorization":
                has_auth = True
        has_body = chunked or (length is not None and length.strip() != b"0")
        refused: list[tuple[int, str]] = []  # (status, detail) once the middleware answers for the app
        started = body_done = head_done = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started, head_done
            if refused:
                return  # whatever the app made of the cut body (a parse error, ...), the answer is ours
            if msg["type"] == "http.response.start":
                started = True
                status["code"] = msg["status"]
                headers = [*msg.get("headers", []), *SECURITY_HEADERS]
                if has_body and not body_done:
                    # Answered before its body was read (an error, or a route that ignores it): the
                    # rest is never waited for, on this connection or the next request's.
                    headers.append((b"connection", b"close"))
                msg = {**msg, "headers": headers}
            elif msg["type"] == "http.response.body":
                if head:
                    # A HEAD answer ends with its headers: the first body message closes it and stops
                    # the app, so a streamed file is never read past its first chunk.
                    if head_done:
                        raise _Refused()
                    head_done = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    if msg.get("more_body", False):
                        raise _Refused()
                    return
                if msg.get("more_body", False):
                    try:
                        async with asyncio.timeout(self.send_timeout):
                            await send(msg)
                    except TimeoutError:
                        log.warning("response stalled: the client read nothing; connection dropped",
                                    extra={"path": scope.get("path"), "seconds": self.send_timeout})  # fmt: skip
                        abort = scope.get("vf.abort")
                        if abort is not None:
                            abort()  # close now: a plain close would wait for the client to read
                            await asyncio.sleep(0)  # let the server see the connection gone
                        raise _Refused() from None
                    return
            await send(msg)

        try:
            if not has_body:
                await self.app(scope, receive, tracking_send)
                return
            limit = self.max_upload if is_upload_route(method, scope["path"]) else self.max_body
            if length is not None:
                try:
                    declared = int(length)
                except ValueError:
                    declared = limit + 1
                if declared > limit:
                    await self._answer(send, status, 413, f"request body too large (at most {limit} bytes here)")
                    return
            if needs_credentials(method, scope["path"]):
                challenge = {"WWW-Authenticate": 'Basic realm="vf-hub"'}
                try:
                    known = has_auth and await run_in_threadpool(_authenticate, scope)
                except HubError as exc:
                    await self._answer(send, status, exc.status, exc.message, exc.headers)
                    return
                if not known:
                    await self._answer(send, status, 401, "authentication required", challenge)
                    return
            loop = asyncio.get_running_loop()
            t0: float | None = None
            received = 0

            async def guarded_receive() -> Message:
                nonlocal received, body_done, t0
                if body_done:
                    return await receive()  # after the body only a disconnect comes: never timed
                if t0 is None:
                    t0 = loop.time()  # the clock starts when the app first asks: our own delays never count
                # mod_reqtimeout's rule: a grace, then one second per ``body_rate`` bytes delivered.
                try:
                    async with asyncio.timeout_at(t0 + self.body_grace + received / self.body_rate):
                        msg = await receive()
                except TimeoutError:
                    refused.append((408, "request body too slow; send it faster or retry"))
                    raise _Refused() from None
                if msg["type"] == "http.request":
                    received += len(msg.get("body", b""))
                    if received > limit:
                        refused.append((413, f"request body too large (at most {limit} bytes here)"))
                        raise _Refused()
                    body_done = not msg.get("more_body", False)
                else:
                    body_done = True  # the client is gone
                return msg

            await self.app(scope, guarded_receive, tracking_send)
        except _Refused:
            pass
        finally:
            if refused and not started:
                code, detail = refused[0]
                await self._answer(send, status, code, detail)
            self._log(scope, status["code"], start)

    async def _answer(
        self, send: Send, status: dict[str, int], code: int, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        """The middleware's own answer; it always closes the connection (the body is left unread)."""
        import json

        status["code"] = code
        body = json.dumps({"detail": detail}).encode()
        raw = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *SECURITY_HEADERS,
            *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()),
        ]
        await send({"type": "http.response.start", "status": code, "headers": raw})
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
    # Inside LimitsAndLogs (added last, so outermost): cached index pages are limited, logged and given
    # the security headers like every other answer, and a HEAD reaches them as a GET without a body.
    app.add_middleware(index.CachedIndexPages)
    app.add_middleware(LimitsAndLogs, settings=settings)
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

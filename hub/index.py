"""The package index: PEP 503 HTML and PEP 691 JSON (with PEP 592, 658/714 and 700 fields), and files.

Rendered pages are cached per (scope, project, format). The cache is dropped whenever the database's
``generation`` counter moves, which every write bumps, so several workers (each with its own cache)
never serve a stale page. The hot path uses Core SQL, never the ORM.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response, StreamingResponse
from packaging.utils import canonicalize_name
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from hub.auth import Principal
from hub.errors import HubError
from hub.http import (
    _NEEDS_DATABASE,
    content_disposition,
    generation,
    hub_of,
    principal_from_cache,
    principal_of,
    read_generation,
)
from hub.search import visibility_clause
from hub.storage import file_key
from hub.versions import version_key

if TYPE_CHECKING:
    from hub.core import Hub

JSON_V1 = "application/vnd.pypi.simple.v1+json"
HTML_V1 = "application/vnd.pypi.simple.v1+html"
TEXT_HTML = "text/html"
API_VERSION = "1.1"
_ALIASES = {
    "application/vnd.pypi.simple.latest+json": JSON_V1,
    "application/vnd.pypi.simple.latest+html": HTML_V1,
}


def negotiate(accept: str | None, fmt: str | None = None) -> str | None:
    """The index MIME type to answer with for an ``Accept`` header (None: nothing acceptable -> 406).

    Order of preference at equal quality: JSON v1, HTML v1, text/html. No header or a bare ``*/*``
    means text/html (what legacy clients expect).
    """
    if fmt:
        fmt = _ALIASES.get(fmt, fmt)
        return fmt if fmt in (JSON_V1, HTML_V1, TEXT_HTML) else None
    if not accept or not accept.strip():
        return TEXT_HTML
    best: tuple[float, int, str] | None = None
    prefs = {JSON_V1: 3, HTML_V1: 2, TEXT_HTML: 1}
    for part in accept.split(","):
        bits = [b.strip() for b in part.split(";")]
        mtype = _ALIASES.get(bits[0].lower(), bits[0].lower())
        q = 1.0
        for b in bits[1:]:
            if b.startswith("q="):
                try:
                    q = float(b[2:])
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        if mtype in prefs:
            cands = [mtype]
        elif mtype in ("*/*", "application/*"):
            cands = [TEXT_HTML] if mtype == "*/*" else [JSON_V1, HTML_V1]
        elif mtype == "text/*":
            cands = [TEXT_HTML]
        else:
            continue
        for c in cands:
            # A wildcard never beats an explicit type of the same quality.
            score = (q, prefs[c] if mtype in prefs else 0, c)
            if best is None or score[:2] > best[:2]:
                best = score
    return best[2] if best else None


def content_type_for(mime: str) -> str:
    return "text/html; charset=utf-8" if mime == TEXT_HTML else mime


@dataclass
class CachedPage:
    body: bytes
    etag: str
    env_id: int | None = None
    owner_id: int | None = None
    private: bool = False


class IndexCache:
    """An LRU of rendered index pages, valid for one database generation."""

    def __init__(self, hub: Hub, max_entries: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.hub = hub
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._data: OrderedDict[tuple[Any, ...], CachedPage] = OrderedDict()
        self._generation: int | None = None
        self._lock = threading.Lock()

    def sync(self, gen: int | None = None) -> None:
        if gen is None:
            gen = self.hub.db.generation()
        with self._lock:
            if gen != self._generation:
                self._data.clear()
                self.bytes = 0
                self._generation = gen

    def get(self, key: tuple[Any, ...]) -> CachedPage | None:
        with self._lock:
            page = self._data.get(key)
            if page is not None:
                self._data.move_to_end(key)
            return page

    def put(self, key: tuple[Any, ...], page: CachedPage, generation: int | None = None) -> None:
        """Keep ``page``, rendered from data read at ``generation`` or later. A page rendered for an
        older generation than the cache holds now (its request read the generation before a write and
        its rows after, or before) is never kept: it could be stale in the newer generation."""
        if len(page.body) > self.max_bytes // 4:
            return  # a giant page is rendered each time rather than evicting everything else
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            old = self._data.pop(key, None)
            if old is not None:
                self.bytes -= len(old.body)
            self._data[key] = page
            self.bytes += len(page.body)
            while len(self._data) > self.max_entries or self.bytes > self.max_bytes:
                _k, evicted = self._data.popitem(last=False)
                self.bytes -= len(evicted.body)

    def invalidate(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes = 0
            self._generation = None


def _iso(ts: Any) -> str:
    """PEP 700 ``upload-time``: ``yyyy-mm-ddThh:mm:ss.ffffffZ`` (UTC). SQLite hands back strings."""
    if not isinstance(ts, dt.datetime):
        ts = dt.datetime.fromisoformat(str(ts))
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_project(hub: Hub, name: str, owner: str | None) -> dict[str, Any] | None:
    sql = (
        "SELECT e.id, e.name, e.owner_id, e.private, o.name FROM environments e JOIN owners o ON o.id = e.owner_id"
        " WHERE e.name = :n"
    )
    params: dict[str, Any] = {"n": name}
    if owner is not None:
        sql += " AND o.name = :o"
        params["o"] = owner
    with hub.db.engine.connect() as conn:
        env = conn.execute(text(sql), params).first()
        if env is None:
            return None
        files = conn.execute(
            text(
                "SELECT v.version, v.yanked, v.yank_reason, f.filename, f.sha256, f.size, f.requires_python,"
                " f.core_metadata_sha256, f.uploaded_at FROM files f JOIN versions v ON v.id = f.version_id"
                " WHERE f.env_id = :i"
            ),
            {"i": env[0]},
        ).all()
    files = sorted(files, key=lambda r: (version_key(r[0]), r[3]))
    return {"env_id": env[0], "name": env[1], "owner_id": env[2], "private": bool(env[3]), "files": files}


def render_project(data: dict[str, Any], mime: str, root: str) -> bytes:
    name = data["name"]
    if mime == JSON_V1:
        files = []
        for r in data["files"]:
            yanked: bool | str = (r[2] or True) if r[1] else False
            core: bool | dict[str, str] = {"sha256": r[7]} if r[7] else False
            entry: dict[str, Any] = {
                "filename": r[3],
                "url": f"{root}/{file_key(r[4], r[3])}",
                "hashes": {"sha256": r[4]},
                "requires-python": r[6],
                "size": int(r[5]),
                "upload-time": _iso(r[8]),
                "yanked": yanked,
                # PEP 714's key only: pip 23.0 (Debian 12's) crashes on the old JSON key
                # `dist-info-metadata` when it is an object, which is why PEP 714 renamed it.
                "core-metadata": core,
            }
            files.append(entry)
        versions = sorted({r[0] for r in data["files"]}, key=version_key)
        doc = {"meta": {"api-version": API_VERSION}, "name": name, "versions": versions, "files": files}
        return json.dumps(doc, separators=(",", ":")).encode()
    out = [
        "<!DOCTYPE html>\n<html>\n<head>\n",
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n',
        f"<title>Links for {html.escape(name)}</title>\n</head>\n<body>\n<h1>Links for {html.escape(name)}</h1>\n",
    ]
    for r in data["files"]:
        attrs = [f'href="{html.escape(f"{root}/{file_key(r[4], r[3])}")}#sha256={r[4]}"']
        if r[6]:
            attrs.append(f'data-requires-python="{html.escape(r[6])}"')
        if r[7]:
            attrs.append(f'data-dist-info-metadata="sha256={r[7]}"')
            attrs.append(f'data-core-metadata="sha256={r[7]}"')
        if r[1]:
            attrs.append(f'data-yanked="{html.escape(r[2] or "")}"')
        out.append(f"<a {' '.join(attrs)}>{html.escape(r[3])}</a><br/>\n")
    out.append("</body>\n</html>\n")
    return "".join(out).encode()


def render_list(names: list[str], mime: str) -> bytes:
    if mime == JSON_V1:
        doc = {"meta": {"api-version": API_VERSION}, "projects": [{"name": n} for n in names]}
        return json.dumps(doc, separators=(",", ":")).encode()
    out = [
        "<!DOCTYPE html>\n<html>\n<head>\n",
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Simple index</title>\n</head>\n<body>\n',
    ]
    # a relative link that can never read as a scheme (``javascript:``): names are checked at
    # upload, and percent-encoded here as well
    out.extend(f'<a href="{quote(n, safe="")}/">{html.escape(n)}</a><br/>\n' for n in names)
    out.append("</body>\n</html>\n")
    return "".join(out).encode()


def _respond(request: Request, page: CachedPage, mime: str, private: bool) -> Response:
    headers = {
        "Vary": "Accept, Authorization",
        "ETag": page.etag,
        # Revalidate every time (cheap: ETag -> 304), so a version pushed a second ago is installable now.
        "Cache-Control": "private, no-cache" if private else "public, max-age=0, must-revalidate",
    }
    if request.headers.get("if-none-match") == page.etag:
        return Response(status_code=304, headers=headers)
    return Response(page.body, media_type=content_type_for(mime), headers=headers)


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


router = APIRouter()


def _mime(request: Request) -> str:
    mime = negotiate(request.headers.get("accept"), request.query_params.get("format"))
    if mime is None:
        raise HubError(406, f"acceptable index formats: {JSON_V1}, {HTML_V1}, {TEXT_HTML}")
    return mime


def _owner_scope(owner: str | None) -> str | None:
    if owner is None:
        return None
    return canonicalize_name(owner)


def _caller(request: Request, cached_only: bool) -> Any:
    """The caller (a Principal or None); with ``cached_only``, from memory alone, or
    ``_NEEDS_DATABASE`` where only the database can tell."""
    if not cached_only:
        return principal_of(request)
    found = principal_from_cache(request)
    if found is _NEEDS_DATABASE:
        return _NEEDS_DATABASE
    return found if isinstance(found, Principal) else None


def _project_list(request: Request, owner: str | None, *, cached_only: bool = False) -> Response | None:
    """``/simple/`` or ``/{owner}/simple/``. With ``cached_only`` (on the event loop), None where
    answering needs the database; the caller then runs it again in a worker thread."""
    hub = hub_of(request)
    mime = _mime(request)
    scope = _owner_scope(owner)
    if owner is not None and scope != owner:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/{scope}/simple/", status_code=301)
    principal = _caller(request, cached_only)
    if principal is _NEEDS_DATABASE:
        return None
    vis = principal.visibility_key() if principal else "anon"
    key = ("list", scope, vis, mime)
    gen = generation(request)
    hub.index_cache.sync(gen)
    page = hub.index_cache.get(key)
    if page is None and cached_only:
        return None
    if page is None:
        from sqlalchemy import select

        from hub.models import Environment, Owner

        stmt = (
            select(Environment.name)
            .join(Owner, Owner.id == Environment.owner_id)
            .where(visibility_clause(principal))
            .order_by(Environment.name)
        )
        if scope is not None:
            stmt = stmt.where(Owner.name == scope)
        with hub.db.engine.connect() as conn:
            if (
                scope is not None
                and conn.execute(text("SELECT 1 FROM owners WHERE name = :o"), {"o": scope}).first() is None
            ):
                raise HubError(404, f"owner {owner!r} not found")
            names = [r[0] for r in conn.execute(stmt)]
        body = render_list(names, mime)
        page = CachedPage(body, _etag(body))
        hub.index_cache.put(key, page, gen)
    return _respond(request, page, mime, principal is not None)


def _hidden(request: Request, what: str) -> HubError:
    """404 for something absent or not visible; 401 + challenge for anonymous callers if configured."""
    hub = hub_of(request)
    if hub.settings.index_auth_challenge and principal_of(request) is None:
        return HubError(401, "authentication required", {"WWW-Authenticate": 'Basic realm="vf-hub"'})
    return HubError(404, what)


def _project_detail(
    request: Request, owner: str | None, project: str, *, cached_only: bool = False
) -> Response | None:
    """``/simple/{project}/`` or ``/{owner}/simple/{project}/``; ``cached_only`` as for the list."""
    hub = hub_of(request)
    norm = canonicalize_name(project)
    scope = _owner_scope(owner)
    if norm != project or (owner is not None and scope != owner):
        prefix = f"/{scope}" if scope else ""
        return RedirectResponse(
            f"{request.scope.get('root_path', '')}{prefix}/simple/{norm}/", status_code=301
        )
    mime = _mime(request)
    principal: Any = None
    if request.headers.get("authorization"):
        # a credential is checked before the project is looked up: a bad (or a worker's) token
        # gets the same answer whether or not a private project of that name exists
        principal = _caller(request, cached_only)
        if principal is _NEEDS_DATABASE:
            return None
    key = ("project", scope, norm, mime)
    gen = generation(request)
    hub.index_cache.sync(gen)
    page = hub.index_cache.get(key)
    if page is None:
        if cached_only:
            return None
        data = load_project(hub, norm, scope)
        if data is None:
            raise _hidden(request, f"project {project!r} not found")
        body = render_project(data, mime, request.scope.get("root_path", ""))
        page = CachedPage(body, _etag(body), data["env_id"], data["owner_id"], data["private"])
        hub.index_cache.put(key, page, gen)
    if page.private:
        if principal is None:
            principal = _caller(request, cached_only)
        if principal is _NEEDS_DATABASE:
            return None
        if principal is None or not principal.can_read(page.owner_id or 0, page.env_id or 0, True):
            raise _hidden(request, f"project {project!r} not found")
    return _respond(request, page, mime, page.private)


async def _serve(request: Request, view: Any, *args: Any) -> Response:
    """Answer an index page on the event loop when memory holds it (the page cache and, for private
    pages, the principal cache), else in a worker thread. The cached path is the one installers hit:
    each ``pip install`` fetches a page per requirement, again and again, and a hop into the thread
    pool plus a database read per request halved the index's throughput."""
    await read_generation(request)
    response = view(request, *args, cached_only=True)
    if response is None:
        response = await run_in_threadpool(view, request, *args)
    return response


# The index routes' paths (the routes below): /simple/, /{owner}/simple/, and a project's page under each.
_LIST_PATH = re.compile(r"/(?:([^/]+)/)?simple/")
_PROJECT_PATH = re.compile(r"/(?:([^/]+)/)?simple/([^/]+)/")


class CachedIndexPages:
    """Pure ASGI, in front of the framework: a GET of an index page that memory can answer (the page
    cache and, for a private page, the principal cache) is answered here, by the same views as the
    routes below (``cached_only``); everything else goes on to the routes, unchanged.

    Why: installers fetch an index page per requirement, again and again, and the framework's own
    work for one request (middleware, matching against every route, resolving the endpoint's
    parameters) cost several times what answering a cached page does (measured in-process and with
    wrk). It sits inside the hub's own middleware (``hub.app.LimitsAndLogs``), so the request is still
    logged, limited, given the security headers, and HEAD still answers without a body. Any error
    (406, a private page the caller may not see) is left to the routes, which answer it as always.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.answered = 0  # pages answered here (tests check the fast path is taken)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"]
            m = _PROJECT_PATH.fullmatch(path)
            view: Any = None
            if m is not None:
                view, args = _project_detail, (m.group(1), m.group(2))
            else:
                m = _LIST_PATH.fullmatch(path)
                if m is not None:
                    view, args = _project_list, (m.group(1),)
            if view is not None:
                request = Request(scope)
                response = None
                try:
                    await read_generation(request)
                    response = view(request, *args, cached_only=True)
                except HubError:
                    response = None  # the route answers it, with the app's error handling
                if response is not None:
                    self.answered += 1
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


@router.get("/simple/", tags=["index"], summary="All projects (PEP 503 / PEP 691)")
async def simple_root(request: Request) -> Response:
    return await _serve(request, _project_list, None)


@router.get(
    "/simple/{project}/",
    tags=["index"],
    summary="Files of one project (PEP 503 / 691 / 700)",
)
async def simple_project(request: Request, project: str) -> Response:
    return await _serve(request, _project_detail, None, project)


@router.get("/simple/{project}", include_in_schema=False)
async def simple_project_noslash(request: Request, project: str) -> Response:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/simple/{canonicalize_name(project)}/", 301)


@router.get("/{owner}/simple/", tags=["index"], summary="One owner's projects")
async def owner_simple_root(request: Request, owner: str) -> Response:
    return await _serve(request, _project_list, owner)


@router.get(
    "/{owner}/simple/{project}/",
    tags=["index"],
    summary="Files of one owner's project",
)
async def owner_simple_project(request: Request, owner: str, project: str) -> Response:
    return await _serve(request, _project_detail, owner, project)


@router.get("/{owner}/simple/{project}", include_in_schema=False)
async def owner_simple_project_noslash(request: Request, owner: str, project: str) -> Response:
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/{canonicalize_name(owner)}/simple/{canonicalize_name(project)}/", 301)


@router.get(
    "/files/{prefix}/{sha256}/{filename}",
    tags=["index"],
    summary="Download a file (content addressed)",
)
def download_file(request: Request, prefix: str, sha256: str, filename: str) -> Response:
    hub = hub_of(request)
    want_metadata = filename.endswith(".metadata")
    base = filename[: -len(".metadata")] if want_metadata else filename
    if prefix != sha256[:2] or len(sha256) != 64:
        raise HubError(404, "file not found")
    # a credential is checked first: a bad token is refused whether or not the file exists
    principal = principal_of(request, allow_worker=True) if request.headers.get("authorization") else None
    with hub.db.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT f.storage_key, f.core_metadata, e.id, e.owner_id, e.private, f.size FROM files f"
                " JOIN environments e ON e.id = f.env_id WHERE f.filename = :fn AND f.sha256 = :sha"
            ),
            {"fn": base, "sha": sha256},
        ).first()
    if row is None:
        raise _hidden(request, "file not found")
    if row[4]:
        # A worker token reads no private file here (its job's files come from the job API): the same
        # 404 as an absent file, never a 403 that would say the file exists.
        if principal is None:
            principal = principal_of(request, allow_worker=True)
        if principal is None or principal.scope == "worker" or not principal.can_read(row[3], row[2], True):
            raise _hidden(request, "file not found")
    # Visibility can change, so no file is cached as immutable: a private one only by the client (and
    # revalidated), a public one by shared caches for ten minutes.
    cache = "private, no-cache" if row[4] else "public, max-age=600"
    if want_metadata:
        if row[1] is None:
            raise HubError(404, "no core metadata for this file")
        return Response(
            row[1].encode("utf-8"), media_type="text/plain; charset=utf-8", headers={"Cache-Control": cache}
        )
    storage = hub.storage
    from hub.storage import LocalStorage

    head = request.scope.get("vf_head")  # HEAD (answered as GET by the middleware) counts nothing
    if not head:
        hub.downloads.count_download(row[2])
    media = "application/zip" if base.endswith(".whl") else "application/gzip"
    headers = {"Cache-Control": cache, "Content-Disposition": content_disposition(base)}
    local = isinstance(storage, LocalStorage)
    if local and not (storage.root / row[0]).is_file():
        raise HubError(404, "file not found")
    if head:  # the headers only: a HEAD never opens the file (or fetches it from S3)
        return Response(media_type=media, headers={**headers, "Content-Length": str(row[5])})
    if local:
        return FileResponse(storage.root / row[0], media_type=media, headers=headers)
    try:
        chunks = storage.iter_bytes(row[0])
        first = next(chunks, b"")
    except KeyError:
        raise HubError(404, "file not found") from None

    def body() -> Any:
        yield first
        yield from chunks

    return StreamingResponse(body(), media_type=media, headers={**headers, "Content-Length": str(row[5])})

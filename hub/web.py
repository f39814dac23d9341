"""Server-rendered pages (Jinja2, no build step): home/search, owner, environment, source, sign-in.

Pages read the caller from the session cookie as well as from ``Authorization``. Signing in with a
token creates a server-side session: a new read-scope token of the same user with the signing token's
limits (owner/environment, expiry no later than the signer's, at most ``session_days``), valid only
while the signer is, whose secret is the cookie (HttpOnly, SameSite=Lax, ``Secure`` over HTTPS or
when configured) and is accepted nowhere but the cookie; signing out revokes it. Sessions and
check-worker tokens cannot sign in. The raw token typed in
is never stored in the browser. Every form carries a CSRF token (double-submit: a random cookie and the
same value in the form). Pages only read; writes go through the token-authenticated API.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from packaging.utils import canonicalize_name

from hub import search, source
from hub.auth import lookup_token
from hub.errors import HubError, not_found
from hub.http import SESSION_COOKIE, count_auth_failure, hub_of, principal_of
from hub.models import utcnow
from hub.queries import (
    check_tags,
    env_summary,
    install_commands,
    leaderboard,
    load_env,
    owner_by_name,
    resolve_version,
    sdist_of,
    sorted_versions,
    version_out,
)
from hub.render import render_readme

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
router = APIRouter(include_in_schema=False)


CSRF_COOKIE = "vfhub_csrf"


def _secure(request: Request) -> bool:
    return hub_of(request).settings.cookie_secure or request.url.scheme == "https"


def _csrf_value(request: Request) -> str:
    """This browser's CSRF token (from its cookie, or a new one that the response will set)."""
    value = request.cookies.get(CSRF_COOKIE) or request.scope.get("vf_new_csrf")
    if not value or len(value) > 100:
        value = secrets.token_urlsafe(32)
        request.scope["vf_new_csrf"] = value
    return value


def check_csrf(request: Request, submitted: str) -> None:
    cookie = request.cookies.get(CSRF_COOKIE) or ""
    if not cookie or not submitted or not hmac.compare_digest(cookie.encode(), submitted.encode()):
        raise HubError(403, "the form expired or came from another site; reload the page and try again")


def _finish(request: Request, resp: Response) -> Response:
    """Set the CSRF cookie if this request made one, and clear a session cookie that did not work."""
    new = request.scope.get("vf_new_csrf")
    if new:
        resp.set_cookie(
            CSRF_COOKIE, new, httponly=True, samesite="strict", secure=_secure(request), path="/"
        )
    if request.scope.get("vf_clear_session"):
        resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


def _ctx(request: Request, **kw: Any) -> dict[str, Any]:
    hub = hub_of(request)
    base = hub.settings.public_url or str(request.base_url).rstrip("/")
    return {
        "request": request,
        "root": request.scope.get("root_path", ""),
        "base": base,
        "principal": principal_of(request, allow_cookie=True),
        "csrf": _csrf_value(request),
        **kw,
    }


def _page(request: Request, template: str, status: int = 200, **kw: Any) -> HTMLResponse:
    resp = templates.TemplateResponse(request, template, _ctx(request, **kw), status_code=status)
    _finish(request, resp)
    resp.headers["Cache-Control"] = "private, no-cache"
    # The only script is the hub's own static copy.js (no inline script, so an uploaded README that
    # slipped past the sanitiser still runs nothing; everything else the hub serves from its origin is
    # text/plain, zip or gzip with nosniff, never script). README images may come from anywhere.
    resp.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; object-src 'none'; img-src 'self' https: data:; "
        "style-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )
    return resp


@router.get("/", response_class=HTMLResponse)
def home(
    request: Request,
    q: Annotated[str, Query(max_length=200)] = "",
    tag: Annotated[list[str] | None, Query()] = None,
    sort: Annotated[str, Query(max_length=20)] = "downloads",
    page: Annotated[int, Query(ge=1, le=100000)] = 1,
) -> HTMLResponse:
    hub = hub_of(request)
    principal = principal_of(request, allow_cookie=True)
    per_page = 20
    tags_filter = check_tags(hub, tag)
    if sort not in search.SORTS:
        sort = "downloads"
    with hub.db.session() as s:
        total, rows = search.search_envs(
            s, principal, q=q, tags=tags_filter, sort=sort, page=page, per_page=per_page
        )
        envs = [env_summary(e, o) for e, o in rows]
        tags = search.popular_tags(s, principal)

    def url(p: int) -> str:
        params: list[tuple[str, Any]] = [
            ("q", q),
            ("sort", sort),
            *[("tag", t) for t in tags_filter],
            ("page", p),
        ]
        return f"{request.scope.get('root_path', '')}/?" + urlencode(params)

    return _page(
        request,
        "home.html",
        q=q,
        sort=sort,
        envs=envs,
        total=total,
        page=page,
        per_page=per_page,
        tags=tags,
        active_tags=tags_filter,
        prev_url=url(page - 1),
        next_url=url(page + 1),
    )


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request) -> HTMLResponse:
    return _page(request, "signin.html", error=None)


@router.post("/signin")
def signin(
    request: Request,
    token: Annotated[str, Form(max_length=300)],
    csrf: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    hub = hub_of(request)
    check_csrf(request, csrf)
    token = token.strip()
    with hub.db.session() as s:
        principal = lookup_token(s, token)
    if principal is None or principal.session:  # a session never makes another one
        count_auth_failure(request, token or "-")
        return _page(request, "signin.html", status=401, error="That token is invalid, expired or revoked.")
    if principal.scope == "worker":
        return _page(request, "signin.html", status=403, error="A check-worker token cannot sign in.")
    secret, expires = hub.accounts.start_session(principal, hub.settings.session_days)
    now = utcnow()
    resp = RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
    resp.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=max(1, int((expires - now).total_seconds())),
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/",
    )
    return resp


@router.post("/signout")
def signout(request: Request, csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
    """End the session: its token is revoked on the server, not only forgotten by the browser."""
    hub = hub_of(request)
    check_csrf(request, csrf)
    session = request.cookies.get(SESSION_COOKIE)
    if session:
        hub.accounts.end_session(session)
    resp = RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


@router.get("/{owner}", response_class=HTMLResponse)
def owner_page(request: Request, owner: str) -> HTMLResponse:
    hub = hub_of(request)
    principal = principal_of(request, allow_cookie=True)
    with hub.db.session() as s:
        own = owner_by_name(s, owner)
        if own is None:
            raise not_found(f"owner {owner!r} not found")
        _total, rows = search.search_envs(s, principal, owner=own.name, sort="name", per_page=100)
        envs = [env_summary(e, o) for e, o in rows]
        return _page(request, "owner.html", owner=own, envs=envs)


def _check_ctx(s: Any, versions: list[Any], ver: Any) -> dict[str, Any]:
    """Verified-environment badges: each version's newest check, and the shown version's history."""
    from hub import checks

    latest = checks.latest_for(s, [v.id for v in versions])
    return {
        "checks": {vid: checks.check_out(run) for vid, run in latest.items()},
        "check_history": [checks.check_out(r, detail=True) for r in checks.history(s, ver.id)] if ver else [],
    }


@router.get("/{owner}/{name}", response_class=HTMLResponse)
def env_page(
    request: Request, owner: str, name: str, version: Annotated[str | None, Query(max_length=64)] = None
) -> Response:
    hub = hub_of(request)
    if name == "simple":
        return RedirectResponse(
            f"{request.scope.get('root_path', '')}/{canonicalize_name(owner)}/simple/", 301
        )
    principal = principal_of(request, allow_cookie=True)
    with hub.db.session() as s:
        env, own = load_env(s, principal, owner, name)
        versions = sorted_versions(s, env)
        ver = None
        if versions:
            try:
                ver = resolve_version(s, env, version or "latest")
            except HubError:
                if version:
                    raise
                ver = versions[0]
        files = version_out(request, s, ver)["files"] if ver else []
        ctx = {
            "env": env_summary(env, own.name),
            "version": ver,
            "versions": versions,
            "files": files,
            "has_sdist": any(f["kind"] == "sdist" for f in files),
            "readme_html": render_readme(ver.readme, ver.readme_content_type) if ver else "",
            "leaderboard": leaderboard(s, env),
            **_check_ctx(s, versions, ver),
            "downloads_30": hub.downloads.downloads(s, env.id)["last_30_days"],
            "install": install_commands(hub, request, s, principal, env, own, ver),
        }
    return _page(request, "env.html", **ctx)


@router.get("/{owner}/{name}/source/{version}", response_class=HTMLResponse)
def source_index(request: Request, owner: str, name: str, version: str) -> HTMLResponse:
    return _source(request, owner, name, version, None)


@router.get("/{owner}/{name}/source/{version}/{path:path}", response_class=HTMLResponse)
def source_file(request: Request, owner: str, name: str, version: str, path: str) -> HTMLResponse:
    return _source(request, owner, name, version, path)


def _source(request: Request, owner: str, name: str, version: str, path: str | None) -> HTMLResponse:
    hub = hub_of(request)
    principal = principal_of(request, allow_cookie=True)
    with hub.db.session() as s:
        env, own = load_env(s, principal, owner, name)
        ver = resolve_version(s, env, version)
        key = sdist_of(s, ver).storage_key
        env_id = f"{own.name}/{env.name}"
    idx = hub.source_cache.get(hub.storage, key, hub.settings.source_max_archive_bytes)
    content = None
    files: list[dict[str, Any]] = []
    if path:
        content = source.member(idx, path).decode("utf-8", "replace")
    else:
        files = idx.files
    return _page(
        request, "source.html", env_id=env_id, version=ver.version, path=path, content=content, files=files
    )


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    try:
        return _page(request, "error.html", status=status, message=message, q="")
    except Exception:
        return HTMLResponse(f"<h1>{status}</h1>", status_code=status)

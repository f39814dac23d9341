"""Request helpers shared by the API, the index and the pages: who is calling, rate limits, errors."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import Request

from hub.auth import TOKEN_PREFIX, Principal, hash_token, lookup_token, parse_authorization, touch_token
from hub.errors import HubError

if TYPE_CHECKING:
    from hub.core import Hub

SESSION_COOKIE = "vfhub_session"


def hub_of(request: Request) -> Hub:
    return request.app.state.hub


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def principal_of(
    request: Request, *, allow_cookie: bool = False, allow_worker: bool = False
) -> Principal | None:
    """The caller, from ``Authorization`` (Bearer or Basic) or, for web pages, the session cookie
    (which must hold a session, and a session is accepted nowhere else).

    A missing credential means anonymous; a wrong one is 401. A valid token is never refused for
    someone else's failures: the token is looked up first, and only failures count, in two buckets
    (per client address and per token prefix), either of which, once empty, turns the next failures
    into 429. A bad session cookie is no failure: the page is served anonymously and the cookie cleared.
    """
    slot = "vf_principal_cookie" if allow_cookie else "vf_principal"
    cached = request.scope.get(slot, False)
    if cached is not False:
        return _worker_guard(cached, allow_worker)
    token = parse_authorization(request.headers.get("authorization"))
    from_cookie = False
    if token is None and allow_cookie:
        token = request.cookies.get(SESSION_COOKIE) or None
        from_cookie = token is not None
    if token is None:
        request.scope[slot] = None
        return None
    principal = authenticate(request, token) if token else None
    # A session serves pages only, and only as the cookie: its value is no API or index token, and
    # an API token put in the cookie is no session (each kind keeps the limits it was made with).
    if principal is not None and principal.session != from_cookie:
        principal = None
    if principal is not None:
        request.scope[slot] = principal
        return _worker_guard(principal, allow_worker)
    if from_cookie:
        request.scope["vf_clear_session"] = True
        request.scope[slot] = None
        return None
    count_auth_failure(request, token)
    raise HubError(401, "invalid, expired or revoked token", {"WWW-Authenticate": 'Basic realm="vf-hub"'})


def generation(request: Request) -> int:
    """The database generation, read once per request (the index cache and the principal cache share it)."""
    gen = request.scope.get("vf_generation")
    if gen is None:
        gen = request.scope["vf_generation"] = hub_of(request).db.generation()
    return gen


def authenticate(request: Request, token: str) -> Principal | None:
    """The principal holding ``token`` (from the principal cache when the generation has not moved)."""
    hub = hub_of(request)
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    gen = generation(request)
    principal = hub.principals.get(digest, gen)
    if principal is not None:
        if principal.token_id is not None and hub.token_tracker.due(principal.token_id):
            with hub.db.session() as s:
                touch_token(s, principal.token_id)
        return principal
    with hub.db.session() as s:
        principal = lookup_token(s, token, hub.token_tracker)
    if principal is not None:
        hub.principals.put(digest, gen, principal)
    return principal


def _worker_guard(principal: Principal | None, allow_worker: bool) -> Principal | None:
    """A check-worker token (scope ``worker``) claims and reports check jobs and does nothing else."""
    if principal is not None and principal.scope == "worker" and not allow_worker:
        raise HubError(403, "a check-worker token can only claim and report check jobs")
    return principal


def count_auth_failure(request: Request, token: str) -> None:
    """Count one failed authentication; 429 once the address or the token prefix has failed too often."""
    hub = hub_of(request)
    if not hub.settings.rate_limit_enabled:
        return
    by_ip = hub.auth_failures.consume(f"ip:{client_ip(request)}")
    by_token = hub.auth_failures.consume(f"tok:{token[:12]}")
    if not (by_ip and by_token):
        raise HubError(
            429,
            "too many failed authentication attempts; slow down",
            {"Retry-After": str(hub.auth_failures.retry_after())},
        )


def require_principal(request: Request, *, write: bool = False) -> Principal:
    principal = principal_of(request)
    if principal is None:
        raise HubError(401, "authentication required", {"WWW-Authenticate": 'Basic realm="vf-hub"'})
    if write:
        if principal.scope != "write":
            raise HubError(403, "this token is read-only")
        check_write_rate(request, principal)
    return principal


def check_write_rate(request: Request, principal: Principal | None) -> None:
    hub = hub_of(request)
    if not hub.settings.rate_limit_enabled:
        return
    key = f"user:{principal.user_id}" if principal else f"ip:{client_ip(request)}"
    if not hub.writes.consume(key):
        raise HubError(
            429, "too many write requests; slow down", {"Retry-After": str(hub.writes.retry_after())}
        )


def content_disposition(filename: str) -> str:
    """``attachment`` with the name quoted safely (RFC 6266 / 5987): no quote, backslash or control
    character from a file name reaches the header."""
    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\;' else "_" for c in filename) or "download"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"

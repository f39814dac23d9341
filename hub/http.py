"""Request helpers shared by the API, the index and the pages: who is calling, rate limits, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final
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


async def read_generation(request: Request) -> int:
    """``generation`` for async handlers: read off the event loop, one read for a batch of requests
    (:class:`GenerationReader`); later ``generation(request)`` calls of this request reuse it."""
    gen = request.scope.get("vf_generation")
    if gen is None:
        gen = request.scope["vf_generation"] = await hub_of(request).generations.current()
    return gen


class GenerationReader:
    """The database generation for async handlers: one read serves every request that arrived
    before it started.

    A caller is never handed a read that was already in flight when it arrived, only one that started
    after it, so a write acknowledged before a request arrived is always seen: the freshness of one
    read per request. Under load, though, one round trip serves the whole batch that queued during the
    previous one, instead of each request paying a thread hop and a query of its own (measured: that
    per-request read, with its hop into the thread pool, made the index 1.7x slower). The read runs on
    a thread of its own, so a thread pool saturated by slow handlers never holds the index up.
    """

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-generation")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next: asyncio.Future[int] | None = None  # the read that has not started yet
        self._reading = False
        self._task: asyncio.Task[None] | None = None  # a reference, so the running read is not collected
        self.reads = 0  # reads done (tests check that requests share them)

    async def current(self) -> int:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (a test client's): nothing of the old one is valid
            self._loop, self._next, self._reading, self._task = loop, None, False, None
        fut = self._next
        if fut is None:
            fut = self._next = loop.create_future()
            if not self._reading:
                self._start(loop)
        # Shielded: a request that goes away must not cancel the read the others wait for.
        return await asyncio.shield(fut)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        fut, self._next = self._next, None
        assert fut is not None
        self._reading = True
        self._task = loop.create_task(self._run(loop, fut))

    async def _run(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[int]) -> None:
        try:
            value = await loop.run_in_executor(self._executor, self._read)
        except asyncio.CancelledError:  # the loop is closing
            fut.cancel()
            raise
        except Exception as exc:  # the waiters get the error (a database that is down answers 500/503)
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: no "never retrieved" warning when every waiter left
        else:
            self.reads += 1
            if not fut.done():
                fut.set_result(value)
        finally:
            self._reading = False
            if self._next is not None and loop is self._loop:
                self._start(loop)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


_NEEDS_DATABASE: Final = object()


def principal_from_cache(request: Request) -> Principal | object | None:
    """The caller as ``principal_of`` would answer, when memory alone can say it (no credentials, or a
    token in the principal cache for this request's generation whose use needs no recording), else
    ``_NEEDS_DATABASE``. The async index handlers answer cached pages on the event loop with it and
    hand everything else (a first sight of a token, a wrong one, a ``last_used_at`` due) to a worker
    thread. The generation must have been read (``read_generation``)."""
    cached = request.scope.get("vf_principal", False)
    if cached is not False:
        return _worker_guard(cached, False)
    token = parse_authorization(request.headers.get("authorization"))
    if token is None:
        request.scope["vf_principal"] = None
        return None
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return _NEEDS_DATABASE  # refused (and counted) on the slow path
    hub = hub_of(request)
    principal = hub.principals.get(hash_token(token), request.scope["vf_generation"])
    # A session is no index token (``principal_of`` refuses it outside its cookie): the slow path
    # answers it, 401 and counted, like any other credential that fails.
    if (
        principal is None
        or principal.session
        or (principal.token_id is not None and hub.token_tracker.is_due(principal.token_id))
    ):
        return _NEEDS_DATABASE
    request.scope["vf_principal"] = principal
    return _worker_guard(principal, False)


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

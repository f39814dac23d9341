"""The asynchronous model client used by the rollout engine.

Why a client of our own instead of ``openai.AsyncOpenAI``: at the concurrency RL rollouts need
(hundreds of requests in flight on a 2-core machine) the HTTP transport is the engine's ceiling.
Measured on this machine, 256 requests in flight against the fast loopback server
(``verifiers.testing.fast_server``), requests/s: plain httpx (what openai uses) ~100, httpx over the
``httpx-aiohttp`` transport ~3,800, aiohttp directly ~6,100. So requests go through a transport of
our own or an aiohttp session, and ``ModelClient.http`` offers an httpx ``AsyncClient`` over an
aiohttp pool for anyone who wants httpx's API for raw requests.

Two transports, chosen once per client (:func:`lean_target`):

* the lean HTTP/1.1 transport (:mod:`verifiers.clients.http11`: asyncio protocols, httptools'
  parser, request heads encoded once) for plain ``http://`` base URLs, which is what model servers
  for rollouts are (vLLM, SGLang, the scripted servers). It costs a fraction of aiohttp's CPU per
  request, which is what a rollout spends most of on a fast server;
* aiohttp for everything else: ``https://``, credentials in the URL, a query string or unusual
  characters in the base URL, non-ASCII host names, client headers that the lean transport does
  not send itself (``Host``, ``Accept-Encoding``, framing headers, or values it cannot send as is),
  and whenever ``VF_HTTP_TRANSPORT=aiohttp`` is set (an escape hatch); per request, methods other
  than GET and POST and ``extra_headers`` of those kinds.

Both send the same headers, apply the same timeout, body cap and retry policy, and raise the same
``ModelError`` shapes. Neither reads proxy settings from the environment (the aiohttp session has
always been built with ``trust_env=False``). The heavy imports (aiohttp, httpx, httptools) happen on
first use, so ``import verifiers`` stays light.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import json.encoder as _json_encoder
import os
import random
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verifiers.clients.config import ClientConfig
from verifiers.clients.errors import ModelError, ModelTimeoutError
from verifiers.clients.response import (
    MalformedResponse,
    ModelResponse,
    parse_chat_response,
    parse_completion_response,
)
from verifiers.clients.slots import acquire_slot

if TYPE_CHECKING:
    import aiohttp
    import httpx

    from verifiers.clients.http11 import ConnectionPool, RequestHead


_JSON_DECODER: list[Any] = []


def _json_loads(data: bytes) -> Any:
    """A response body's JSON: msgspec's decoder (several times faster than the stdlib's on the
    token-id and logprob lists of a vLLM reply, a large share of an env worker's CPU), with the
    stdlib as the fallback for what only it reads (``NaN``, ``Infinity``)."""
    if not _JSON_DECODER:
        import msgspec

        _JSON_DECODER.append((msgspec.json.Decoder(), msgspec.DecodeError))
    decoder, error = _JSON_DECODER[0]
    try:
        return decoder.decode(data)
    except error:
        return json.loads(data)


def _json_default(obj: Any) -> Any:
    """Serialise message objects that are not plain dicts (pydantic models, dataclasses)."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} to the model server")


# The C encoder json.dumps(ensure_ascii=False, separators=(",", ":"), default=_json_default) builds
# on each call, built once: the same bytes (tests/clients/test_client.py pins that) for a third less
# CPU per request. Without a circular-reference memo (a memo shared between threads would be wrong):
# a body that refers to itself fails with RecursionError (a ValueError with the memo), either way
# before anything is sent.
_c_encoder = getattr(_json_encoder, "c_make_encoder", None)
_ENCODE = (
    _c_encoder(None, _json_default, _json_encoder.encode_basestring, None, ":", ",", False, False, True)
    if _c_encoder is not None
    else None
)
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default)


def encode_body(body: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON of a request body (non-ASCII text as is, not escaped)."""
    if _ENCODE is not None:
        return "".join(_ENCODE(body, 0)).encode("utf-8")
    return _encoder.encode(body).encode("utf-8")


# Keys of ``sampling_args`` that the openai SDK treats as request options rather than body fields
# (environments written for ``client.chat.completions.create(**sampling_args)`` may pass them).
REQUEST_OPTION_KEYS = frozenset({"extra_body", "extra_headers", "extra_query", "timeout"})


def build_body(base: dict[str, Any], sampling_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge sampling arguments into a request body the way the openai SDK does.

    Everything passes through untouched, except ``extra_body`` whose keys go to the top level (so
    vLLM extras such as ``return_token_ids`` reach the server) and the openai request options
    ``extra_headers`` / ``extra_query`` / ``timeout`` (see :func:`request_options`).
    """
    body = dict(base)
    if sampling_args:
        for key, value in sampling_args.items():
            if key in REQUEST_OPTION_KEYS:
                continue
            body[key] = value
        extra = sampling_args.get("extra_body")
        if extra:
            body.update(extra)
    return body


def request_options(sampling_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``extra_headers``, ``extra_query`` and ``timeout`` from sampling args, as keyword arguments
    for :meth:`ModelClient.request_json` (empty in the common case)."""
    if not sampling_args:
        return {}
    options: dict[str, Any] = {}
    if sampling_args.get("extra_headers"):
        options["headers"] = {str(k): str(v) for k, v in sampling_args["extra_headers"].items()}
    if sampling_args.get("extra_query"):
        options["params"] = {str(k): str(v) for k, v in sampling_args["extra_query"].items()}
    timeout = sampling_args.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        options["timeout"] = float(timeout)
    return options


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_message(status: int, content: bytes) -> str:
    """The most useful line of an error body (OpenAI / vLLM / FastAPI shapes), else its text."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str) and err:
            return err
        for key in ("message", "detail"):
            if data.get(key):
                return str(data[key])
    text = content.decode("utf-8", "replace").strip()
    return text[:500] or f"HTTP {status}"


def error_code(content: bytes) -> str | None:
    """The ``error.code`` of an OpenAI-shaped error body (``context_length_exceeded``), if any."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    err = data.get("error") if isinstance(data, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return str(code) if isinstance(code, str | int) and code != "" else None


def is_transient_status(status: int) -> bool:
    """429 and 5xx are worth retrying; other 4xx never succeed on retry."""
    return status == 429 or status >= 500



# Headers the lean transport writes itself (or whose meaning it would have to implement): a client
# that sets one of them talks through aiohttp instead.
_TRANSPORT_HEADERS = frozenset({"host", "accept-encoding", "content-length", "transfer-encoding", "connection", "te", "upgrade", "expect"})
_LEAN_METHODS = frozenset({"POST", "GET"})  # others (HEAD: a response without its body) go through aiohttp
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/")


_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def valid_header(name: str, value: str) -> bool:
    """A header the lean transport can send as is: a token name, a value without CR, LF or NUL."""
    return bool(name) and all(c in _TOKEN_CHARS for c in name) and not any(c in value for c in "\r\n\0")


@dataclasses.dataclass(frozen=True, slots=True)
class LeanTarget:
    """Where the lean transport connects and what it writes before each path."""

    host: str
    port: int
    host_header: str
    base_path: str


def lean_target(base_url: str, headers: Mapping[str, str]) -> LeanTarget | None:
    """The lean transport's target for this base URL and these client headers, or None when the
    request must go through aiohttp (see the module docstring for the rule)."""
    if os.environ.get("VF_HTTP_TRANSPORT", "").strip().lower() == "aiohttp":
        return None
    try:
        parts = urllib.parse.urlsplit(base_url)
        port = parts.port if parts.port is not None else 80
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme.lower() != "http" or not host or parts.username is not None or parts.password is not None:
        return None
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        return None
    if not host.isascii() or not all(c.isalnum() or c in ".-:" for c in host):
        return None
    if any(c not in _PATH_CHARS for c in parts.path):
        return None
    for name, value in headers.items():
        if name.lower() in _TRANSPORT_HEADERS or not valid_header(name, value):
            return None
    shown = f"[{host}]" if ":" in host else host
    return LeanTarget(host, port, shown if port == 80 else f"{shown}:{port}", parts.path.rstrip("/"))


class ModelClient:
    """An OpenAI-compatible chat/completions client with retries and a bound on requests in flight.

    Usable from several event loops in turn (``evaluate_sync`` runs each call in a fresh loop): the
    connection pool and semaphore are rebuilt when the running loop changes.
    """

    def __init__(self, config: ClientConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = ClientConfig(**overrides)
        elif overrides:  # re-validate: overrides come from users (CLI flags, dicts)
            config = ClientConfig(**{**config.model_dump(), **overrides})
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._api_key = config.resolve_api_key()
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            self._headers["authorization"] = f"Bearer {self._api_key}"
        self._headers.update({k.lower(): v for k, v in config.headers.items()})
        self._lean = lean_target(self.base_url, self._headers)
        self._head: RequestHead | None = None  # the lean transport's request heads, built on first use
        self._pool: ConnectionPool | None = None  # the lean transport's connections (per event loop)
        self._session: aiohttp.ClientSession | None = None
        self._http: httpx.AsyncClient | None = None
        self._context_windows: dict[str, int | None] = {}
        self._window_requests: dict[tuple[str, int], asyncio.Task[int | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._connections: asyncio.Semaphore | None = None  # built with the session (per event loop)
        self._pending: dict[tuple[str, bytes, str], _SampleBatch] = {}
        self._pending_loop: asyncio.AbstractEventLoop | None = None
        self._connection_errors: tuple[type[BaseException], ...] = (OSError,)
        self._stale_errors: tuple[type[BaseException], ...] = ()

    # ----- construction -------------------------------------------------------------------------

    @classmethod
    def from_any(cls, obj: Any = None, **overrides: Any) -> ModelClient:
        """A client from whatever the caller has.

        Accepts a ModelClient (returned as is when no overrides are given), a ClientConfig, a dict of
        ClientConfig fields, a base-URL string, ``None`` (defaults), or an ``openai.AsyncOpenAI`` /
        ``openai.OpenAI`` object (its ``base_url``, ``api_key``, ``max_retries``, timeout and default
        headers are used; openai is never imported here).
        """
        if isinstance(obj, ModelClient):
            return obj if not overrides else cls(obj.config, **overrides)
        if obj is None:
            return cls(None, **overrides)
        if isinstance(obj, ClientConfig):
            return cls(obj, **overrides)
        if isinstance(obj, Mapping):
            return cls(ClientConfig(**{**obj, **overrides}))
        if isinstance(obj, str):
            return cls(None, base_url=obj, **overrides)
        if hasattr(obj, "base_url") and hasattr(obj, "api_key"):
            return cls(None, **{**_openai_client_fields(obj), **overrides})
        raise TypeError(
            "expected a ModelClient, ClientConfig, dict, base-URL string or openai client, "
            f"got {type(obj).__name__}"
        )

    # ----- public API ---------------------------------------------------------------------------

    async def chat(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
    ) -> ModelResponse:
        """POST ``/chat/completions`` and parse choice 0 (with retries; raises ModelError)."""
        base: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            base["tools"] = tools
        if self.config.coalesce_samples and _mergeable(sampling_args):
            body = await self._coalesced("/chat/completions", build_body(base, sampling_args), sampling_args)
        else:
            body = await self.request_json(
                "/chat/completions", build_body(base, sampling_args), **request_options(sampling_args)
            )
        try:
            return parse_chat_response(body)
        except MalformedResponse as exc:
            raise ModelError(200, str(exc), False) from None

    async def completion(
        self, *, model: str, prompt: str, sampling_args: Mapping[str, Any] | None = None
    ) -> ModelResponse:
        """POST ``/completions`` (base models) and parse choice 0."""
        request = build_body({"model": model, "prompt": prompt}, sampling_args)
        if self.config.coalesce_samples and _mergeable(sampling_args):
            body = await self._coalesced("/completions", request, sampling_args)
        else:
            body = await self.request_json("/completions", request, **request_options(sampling_args))
        try:
            return parse_completion_response(body)
        except MalformedResponse as exc:
            raise ModelError(200, str(exc), False) from None

    async def models(self) -> list[str]:
        """Model ids served at ``GET /models`` (with the same retry policy as completions)."""
        body = await self.request_json("/models", None, method="GET")
        return [str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)]

    async def context_window(self, model: str) -> int | None:
        """The context window ``GET /models`` advertises for ``model`` (vLLM's ``max_model_len``,
        or ``context_length`` / ``context_window`` / ``max_context_length``), else None. A listing
        that answered is kept for the client's life; a failed one (bounded to 30 s) is asked again
        by the next caller. Callers at once share one request."""
        if model in self._context_windows:
            return self._context_windows[model]
        loop = asyncio.get_running_loop()
        key = (model, id(loop))
        pending = self._window_requests.get(key)
        if pending is None or pending.get_loop() is not loop:
            pending = self._window_requests[key] = loop.create_task(self._list_window(model))
            pending.add_done_callback(lambda _t: self._window_requests.pop(key, None))
        return await asyncio.shield(pending)

    async def _list_window(self, model: str) -> int | None:
        try:
            async with asyncio.timeout(30):
                body = await self.request_json("/models", None, method="GET")
        except Exception:  # a listing is a hint: any failure is "no window", not remembered
            return None
        cards = body.get("data") if isinstance(body, dict) else None
        size = None
        for card in cards if isinstance(cards, list) else ():
            if isinstance(card, dict) and card.get("id") == model:
                size = next((v for f in ("max_model_len", "context_length", "context_window", "max_context_length")
                             if type(v := card.get(f)) is int and v > 0), None)  # fmt: skip
                break
        self._context_windows[model] = size
        return size

    @property
    def http(self) -> httpx.AsyncClient:
        """An httpx client sharing this client's aiohttp connection pool (for raw requests).

        Must be used from a running event loop. Closing it is not needed: ``aclose()`` closes the pool.
        """
        session = self._session_for_loop()
        if self._http is None:
            import httpx
            from httpx_aiohttp import AiohttpTransport

            self._http = httpx.AsyncClient(
                transport=AiohttpTransport(client=session),
                base_url=self.base_url,
                headers=self._headers,
                timeout=self.config.timeout,
            )
        return self._http

    @property
    def transport(self) -> str:
        """``"lean"`` or ``"aiohttp"``: which transport model requests take (see the module docstring)."""
        return "lean" if self._lean is not None else "aiohttp"

    async def aclose(self) -> None:
        """Close the connection pools (safe to call twice)."""
        session, self._session = self._session, None
        pool, self._pool = self._pool, None
        owner, self._loop = self._loop, None
        self._http = None
        self._semaphore = None
        self._connections = None
        current = asyncio.get_running_loop()
        if pool is not None:
            if owner is current:
                await pool.close()
            else:  # opened in an event loop that has finished: close its sockets directly
                pool.abandon()
        if session is None or session.closed:
            return
        if owner is current:
            await session.close()
        else:  # opened in an event loop that has finished: its sockets cannot be awaited closed here
            _abandon(session)

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"ModelClient(base_url={self.base_url!r})"

    # ----- coalescing identical samples ---------------------------------------------------------

    async def _coalesced(self, path: str, body: dict[str, Any], sampling_args: Mapping[str, Any] | None) -> Any:
        """Join (or open) the batch of identical requests of this event-loop turn; returns the
        response body cut down to this caller's choice (see ``ClientConfig.coalesce_samples``)."""
        options = request_options(sampling_args)
        key = (path, encode_body(body), repr(sorted(options.items())))
        loop = asyncio.get_running_loop()
        pending = self._pending if self._pending_loop is loop else None
        if pending is None:
            pending = self._pending = {}
            self._pending_loop = loop
        batch = pending.get(key)
        if batch is None:
            batch = pending[key] = _SampleBatch(path, body, options)
            # Runs after every task already scheduled for this turn: a group's rollouts, started
            # together by gather(), all reach their first model call before the batch goes out.
            loop.call_soon(self._send_batch, key, batch)
        fut: asyncio.Future[Any] = loop.create_future()
        batch.waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            batch.cancel_if_abandoned()
            raise

    def _send_batch(self, key: tuple[str, bytes, str], batch: _SampleBatch) -> None:
        if self._pending.get(key) is batch:
            del self._pending[key]
        waiters = [w for w in batch.waiters if not w.done()]
        if not waiters:
            return
        body = dict(batch.body)
        if len(waiters) > 1:
            body["n"] = len(waiters)
        batch.task = asyncio.get_running_loop().create_task(self.request_json(batch.path, body, **batch.options))
        batch.task.add_done_callback(lambda task: _hand_out(task, waiters))

    # ----- transport ----------------------------------------------------------------------------

    async def request_json(
        self,
        path: str,
        body: dict[str, Any] | None,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request with the retry policy and return the decoded JSON body.

        ``headers`` add to (or override) the client's headers for this request, ``params`` is a
        query string, ``timeout`` overrides the per-request timeout.
        """
        cfg = self.config
        extra = (headers, params, timeout) if headers or params or timeout else None
        url = self.base_url + path
        content = encode_body(body) if body is not None else None
        if self._loop is not asyncio.get_running_loop():
            self._bind_loop()
        send = self._send_lean if self._lean is not None and method in _LEAN_METHODS else self._send
        semaphore = self._semaphore
        connections = self._connections
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                # Wait for a request slot and then a free connection here, where the calling
                # rollout's clock is paused (slots.acquire_slot), rather than in aiohttp's own
                # connection queue, where the wait would count against the rollout's timeout and
                # the request's own.
                if semaphore is not None:
                    await acquire_slot(semaphore)
                try:
                    if connections is not None:
                        await acquire_slot(connections)
                    try:
                        status, resp_headers, data = await send(method, url, path, content, extra)
                    finally:
                        if connections is not None:
                            connections.release()
                finally:
                    if semaphore is not None:
                        semaphore.release()
            except ModelError as exc:
                error = exc
            else:
                if 200 <= status < 300:
                    try:
                        return _json_loads(data)
                    except ValueError:
                        raise ModelError(
                            status, "response body is not JSON", False, attempts=attempt + 1
                        ) from None
                error = ModelError(status, self._explain(status, error_message(status, data)), is_transient_status(status))
                error.code = error_code(data)
                if error.transient:
                    retry_after = parse_retry_after(resp_headers)
            error.attempts = attempt + 1
            if not error.transient or attempt >= cfg.max_retries:
                raise error
            if retry_after is not None:
                # honour the server's wish, but never beyond the backoff maximum: a `Retry-After:
                # 3600` must not park a rollout for an hour per retry
                delay = min(retry_after, cfg.backoff_max)
            elif attempt == 0 and error.status is None and getattr(error, "stale_connection", False):
                # a pooled keep-alive connection the server had just closed: not a sign of overload,
                # so the first retry goes out at once on a fresh connection
                delay = 0.0
            else:
                delay = random.uniform(0.0, min(cfg.backoff_max, cfg.backoff_initial * (2**attempt)))
            await asyncio.sleep(delay)
            attempt += 1

    async def _send_lean(
        self,
        method: str,
        url: str,
        path: str,
        content: bytes | None,
        extra: tuple[Mapping[str, str] | None, Mapping[str, str] | None, float | None] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One attempt through the lean transport (:mod:`verifiers.clients.http11`)."""
        http11 = _http11 or _load_http11()
        target = self._lean
        assert target is not None
        head = self._head
        if head is None:
            head = self._head = http11.RequestHead(target.host_header, {**self._headers, "accept-encoding": "gzip, deflate"})
        limit = self.config.timeout
        if extra is None:  # the hot path
            data = head.build(method, target.base_path + path, content)
        else:
            headers, params, timeout = extra
            limit = timeout or limit
            if headers and any(
                k.lower() in _TRANSPORT_HEADERS or not valid_header(str(k), str(v)) for k, v in headers.items()
            ):  # a header only aiohttp knows how to send (or to refuse)
                return await self._send(method, url, path, content, extra)
            request_path = target.base_path + path
            if params:
                import yarl  # aiohttp's URL library: the query is encoded exactly as it encoded it

                request_path = yarl.URL.build(path=request_path, encoded=True).extend_query(params).raw_path_qs
            if headers:
                merged = {**self._headers, "accept-encoding": "gzip, deflate", **{k.lower(): v for k, v in headers.items()}}
                data = http11.RequestHead(target.host_header, merged).build(method, request_path, content)
            else:
                data = head.build(method, request_path, content)
        pool = self._pool
        if pool is None:
            pool = self._pool = http11.ConnectionPool(target.host, target.port)
        scope = None
        try:
            async with asyncio.timeout(limit) as scope:
                return await pool.request(data, self.config.max_response_bytes)
        except http11.BodyTooLargeError as exc:
            raise ModelError(exc.status, str(exc), False) from None
        except (http11.TransportError, OSError) as exc:
            if isinstance(exc, TimeoutError) and scope is not None and scope.expired():
                raise ModelTimeoutError(f"no response within {limit:g}s from {url}") from None
            error = ModelError(None, f"connection error talking to {url}: {type(exc).__name__}: {exc}", True)
            error.stale_connection = isinstance(exc, http11.ServerDisconnectedError)  # type: ignore[attr-defined]
            raise error from None

    async def _send(
        self,
        method: str,
        url: str,
        path: str,
        content: bytes | None,
        extra: tuple[Mapping[str, str] | None, Mapping[str, str] | None, float | None] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One attempt through aiohttp."""
        session = self._session_for_loop()
        limit = self.config.timeout
        try:
            if extra is None:  # the hot path: the session's default headers, no per-request merging
                async with asyncio.timeout(limit):
                    async with session.request(method, url, data=content) as response:
                        return response.status, response.headers, await self._read_body(response, url)
            headers, params, timeout = extra
            limit = timeout or limit
            async with asyncio.timeout(limit):
                async with session.request(
                    method, url, data=content, headers=headers, params=params
                ) as response:
                    return response.status, response.headers, await self._read_body(response, url)
        except TimeoutError:
            raise ModelTimeoutError(f"no response within {limit:g}s from {url}") from None
        except self._connection_errors as exc:
            error = ModelError(None, f"connection error talking to {url}: {type(exc).__name__}: {exc}", True)
            error.stale_connection = isinstance(exc, self._stale_errors)  # type: ignore[attr-defined]
            raise error from None

    async def _read_body(self, response: aiohttp.ClientResponse, url: str) -> bytes:
        """The response body, refused past ``max_response_bytes`` (a hostile or broken server must
        not make the engine buffer gigabytes)."""
        cap = self.config.max_response_bytes
        length = response.content_length
        if length is not None and length <= cap:
            return await response.read()  # the common case: a declared length within the cap
        if length is not None:
            raise ModelError(response.status, f"response body of {length} bytes exceeds the {cap}-byte cap (max_response_bytes)", False)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > cap:
                raise ModelError(response.status, f"response body exceeds the {cap}-byte cap (max_response_bytes)", False)
            chunks.append(chunk)
        return b"".join(chunks)

    def _explain(self, status: int, message: str) -> str:
        """Add what the user most likely got wrong to a server's error message."""
        if status == 404 and not self.base_url.rstrip("/").endswith("/v1"):
            return (
                f"{message} (the base URL {self.base_url} does not end in /v1; OpenAI-compatible servers "
                f"such as vLLM serve under /v1: try {self.base_url.rstrip('/')}/v1)"
            )
        return message

    def _bind_loop(self) -> None:
        """Start over in a new event loop: pools and semaphores belong to the loop they were made in
        (``evaluate_sync`` runs each call in a fresh loop)."""
        if self._session is not None:
            _abandon(self._session)
            self._session = None
            self._http = None
        if self._pool is not None:
            self._pool.abandon()
            self._pool = None
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self._semaphore = (
            asyncio.Semaphore(cfg.max_concurrent_requests) if cfg.max_concurrent_requests else None
        )
        # the connection limit (0: none, as for aiohttp), waited for in request_json
        self._connections = asyncio.Semaphore(cfg.max_connections) if cfg.max_connections > 0 else None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        """The aiohttp session of the running event loop (built on first use)."""
        if self._loop is not asyncio.get_running_loop():
            self._bind_loop()
        if self._session is not None:
            return self._session
        import aiohttp

        cfg = self.config
        # keep idle connections for less time than servers do (uvicorn, hence vLLM: 5 s), so that a
        # request rarely goes out on a connection the server is closing at that moment
        connector = aiohttp.TCPConnector(
            limit=cfg.max_connections, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=4.0
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
            headers=self._headers,
        )
        self._connection_errors = (aiohttp.ClientError, OSError)
        self._stale_errors = (aiohttp.ServerDisconnectedError,)
        self._http = None
        return self._session


_http11: Any = None  # verifiers.clients.http11 once loaded (on the first lean request: httptools)


def _load_http11() -> Any:
    global _http11
    from verifiers.clients import http11

    _http11 = http11
    return http11


def _mergeable(sampling_args: Mapping[str, Any] | None) -> bool:
    """Whether a request may share one ``n``-sample request with identical ones."""
    if not sampling_args:
        return True
    extra = sampling_args.get("extra_body") or {}
    return not any(k in sampling_args or k in extra for k in ("n", "seed", "stream"))


@dataclasses.dataclass
class _SampleBatch:
    """Identical requests of one event-loop turn, sent once with ``n`` = their number."""

    path: str
    body: dict[str, Any]
    options: dict[str, Any]
    waiters: list[asyncio.Future[Any]] = dataclasses.field(default_factory=list)
    task: asyncio.Task[Any] | None = None

    def cancel_if_abandoned(self) -> None:
        """Every caller gave up (cancelled): stop the shared request too."""
        if self.task is not None and not self.task.done() and all(w.cancelled() for w in self.waiters):
            self.task.cancel()


def _hand_out(task: asyncio.Task[Any], waiters: list[asyncio.Future[Any]]) -> None:
    """Give each waiter the response body with only its own choice (and its own usage)."""
    if task.cancelled():
        for w in waiters:
            if not w.done():
                w.cancel()
        return
    exc = task.exception()
    if exc is not None:
        for w in waiters:
            if not w.done():
                w.set_exception(exc)
        return
    body = task.result()
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) < len(waiters):
        got = len(choices) if isinstance(choices, list) else 0
        err = ModelError(200, f"asked for {len(waiters)} samples in one request (n), got {got} choices", False)
        for w in waiters:
            if not w.done():
                w.set_exception(err)
        return
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    counts = _choice_completion_tokens(choices, usage) if usage is not None else None
    for i, w in enumerate(waiters):
        if w.done():
            continue
        choice = choices[i]
        one = {**body, "choices": [{**choice, "index": 0}]}
        if usage is not None and counts is not None:
            completion = counts[i]
            # the shared prompt's figures hold for each sample; a cost or completion details
            # counted over all the samples cannot be split per sample, so they are left out
            shared = {k: v for k, v in usage.items() if k not in ("cost", "completion_tokens_details")}
            one["usage"] = {**shared, "completion_tokens": completion,
                            "total_tokens": (usage.get("prompt_tokens") or 0) + completion}
        w.set_result(one)


def _choice_completion_tokens(choices: list[Any], usage: dict[str, Any]) -> list[int]:
    """Each choice's own completion tokens out of a response's total (usage counts all choices).

    Exact from the choice's token ids or sampled logprobs when the server sent them; otherwise the
    total is shared in proportion to each choice's text length (largest remainders, so the shares
    add up to the server's total): a long answer is never reported as the group's average.
    """
    total = usage.get("completion_tokens")
    total = total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else 0
    exact: list[int | None] = []
    sizes: list[int] = []
    for choice in choices:
        choice = choice if isinstance(choice, dict) else {}
        ids = choice.get("token_ids")
        lp = choice.get("logprobs")
        if isinstance(ids, list):
            exact.append(len(ids))
        elif isinstance(lp, dict) and isinstance(lp.get("content"), list):
            exact.append(len(lp["content"]))
        elif isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
            exact.append(len(lp["tokens"]))
        else:
            exact.append(None)
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = choice.get("text") if isinstance(choice.get("text"), str) else message.get("content")
        size = len(text) if isinstance(text, str) else 0
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            size += len(json.dumps(calls, default=str))
        sizes.append(size)
    if all(e is not None for e in exact):
        return [int(e) for e in exact]  # type: ignore[arg-type]
    known = sum(e for e in exact if e is not None)
    rest = max(0, total - known)
    open_ = [i for i, e in enumerate(exact) if e is None]
    weights = [sizes[i] for i in open_]
    if sum(weights) == 0:
        weights = [1] * len(open_)
    scale = sum(weights)
    shares = [rest * w / scale for w in weights]
    floors = [int(x) for x in shares]
    left = rest - sum(floors)
    for j in sorted(range(len(open_)), key=lambda j: shares[j] - floors[j], reverse=True)[:left]:
        floors[j] += 1
    out = [0 if e is None else int(e) for e in exact]
    for j, i in enumerate(open_):
        out[i] = floors[j]
    return out


def _abandon(session: aiohttp.ClientSession) -> None:
    """Drop a session whose event loop has gone (``evaluate_sync`` runs each call in a fresh loop).

    Its pooled sockets belong to that loop and cannot be closed by awaiting from this one, so they are
    closed synchronously, and the session and connector are marked closed so that aiohttp does not
    report an "Unclosed client session" through the old loop's exception handler.
    """
    connector = session.connector
    session._connector = None
    if connector is None:
        return
    try:
        conns = list(getattr(connector, "_conns", {}).values())
        for entries in conns:
            for entry in entries:
                transport = getattr(entry[0], "transport", None)
                sock = getattr(transport, "_sock", None)
                if sock is not None:
                    sock.close()
                    transport._sock = None  # type: ignore[union-attr]
        connector._conns.clear()  # type: ignore[attr-defined]
        connector._closed = True  # type: ignore[attr-defined]
    except Exception:  # private internals of another library: never fail the caller over cleanup
        pass


def _openai_client_fields(obj: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"base_url": str(obj.base_url).rstrip("/")}
    api_key = getattr(obj, "api_key", None)
    if isinstance(api_key, str) and api_key:
        fields["api_key"] = api_key
    max_retries = getattr(obj, "max_retries", None)
    if isinstance(max_retries, int):
        fields["max_retries"] = max_retries
    timeout = getattr(obj, "timeout", None)
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        fields["timeout"] = float(timeout)
    elif timeout is not None and isinstance(getattr(timeout, "read", None), int | float):
        fields["timeout"] = float(timeout.read)
    headers = getattr(obj, "_custom_headers", None)
    if isinstance(headers, Mapping):
        fields["headers"] = {str(k): str(v) for k, v in headers.items() if isinstance(v, str)}
    return fields

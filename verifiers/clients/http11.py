"""A lean HTTP/1.1 transport for :class:`~verifiers.clients.ModelClient`: plain ``http://`` only.

Why: against a fast model server the client's own CPU decides how many rollouts a core runs, and
aiohttp spends about 200 us per request in its general machinery (request and response objects,
multidicts, URL objects, stream readers, tracing hooks). A model request is always the same shape: a
JSON body posted to a few fixed paths on one host. This transport does only that:

* one :class:`asyncio.Protocol` per keep-alive connection, a pool of them per event loop;
* the request line and fixed headers are encoded once per client (:class:`RequestHead`), a request
  is one ``transport.write`` of head + length + body;
* responses are parsed by ``httptools`` (llhttp, strict mode): status line, headers,
  ``Content-Length``, ``Transfer-Encoding: chunked`` and read-until-close bodies; gzip / deflate
  bodies are decompressed (aiohttp advertised and decoded both, so servers may send them).

Hostile or broken servers get bounded work and a clear error, never a hang: at most
``max_header_bytes`` of status line and headers and ``max_headers`` header fields, at most the
caller's body cap (checked against a declared length before reading, against what arrived while
reading, and against the decompressed size), a malformed status line, header or chunk size is an
error, and a connection is reused only after its response was read completely and the server allowed
keep-alive (HTTP/1.1 without ``Connection: close``), never when it sent anything unasked. Slow or
stalled responses are the caller's business: :class:`ModelClient` bounds every request with its
timeout, and a request that is cancelled or times out closes its connection.

Errors are :class:`TransportError` subclasses; the client turns them into the ``ModelError`` shapes
it has always raised for aiohttp's errors (``connection error talking to URL: ...``, transient).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from typing import Any

import httptools

__all__ = [
    "BodyTooLargeError",
    "ConnectionPool",
    "IncompleteResponseError",
    "MalformedResponseError",
    "RequestHead",
    "ServerDisconnectedError",
    "TransportError",
]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_HEADERS = 128
KEEPALIVE_S = 4.0  # less than servers keep idle connections (uvicorn, hence vLLM: 5 s)


class TransportError(Exception):
    """The server's response could not be read (a connection-level failure, worth a retry)."""


class ServerDisconnectedError(TransportError):
    """The connection closed before any byte of a response: typically a keep-alive connection the
    server had just closed (``stale`` is then True: the retry may go out at once)."""

    stale = True


class MalformedResponseError(TransportError):
    """Not HTTP/1.x, or past the header limits."""


class IncompleteResponseError(TransportError):
    """The connection closed in the middle of a response."""


class BodyTooLargeError(Exception):
    """The response body is larger than the cap (``status``: the response's status code)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RequestHead:
    """The bytes of a request up to its body length, built once per (method, target)."""

    __slots__ = ("_cache", "_fixed")

    def __init__(self, host_header: str, headers: Mapping[str, str]) -> None:
        lines = [f"Host: {host_header}\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in headers.items()]
        self._fixed = "".join(lines).encode("utf-8")
        self._cache: dict[tuple[str, str], bytes] = {}

    def build(self, method: str, target: str, body: bytes | None) -> bytes:
        key = (method, target)
        start = self._cache.get(key)
        if start is None:
            start = self._cache[key] = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._fixed
        if body is None:
            return start + b"\r\n"
        return b"%sContent-Length: %d\r\n\r\n%s" % (start, len(body), body)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; it reads one response at a time."""

    __slots__ = (
        "_body",
        "_body_size",
        "_cap",
        "_chunked",
        "_complete",
        "_encoding",
        "_header_bytes",
        "_header_count",
        "_headers",
        "_headers_done",
        "_keep_alive",
        "_length",
        "_parser",
        "_pool",
        "_received",
        "_status",
        "_waiter",
        "closed",
        "idle_since",
        "transport",
    )

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Any] | None = None
        self._parser: Any = None
        self._complete = True

    # ----- asyncio.Protocol -----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if not self._received:
            self._fail(ServerDisconnectedError("Server disconnected"))
        elif self._headers_done and self._length is None and not self._chunked and self._status not in (204, 304):
            self._keep_alive = False  # a body that ends with the connection (HTTP/1.0 style): whole
            self._finish()
        else:
            self._fail(IncompleteResponseError(
                "the server closed the connection before the response was complete "
                f"({self._received} bytes received)"
            ))

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or self._complete:
            # bytes nobody asked for (after a complete response, or on an idle connection): the
            # connection's framing can no longer be trusted
            self._keep_alive = False
            self.close()
            return
        self._received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(MalformedResponseError("the server switched protocols (Upgrade) on a model request"))
            return
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, TransportError | BodyTooLargeError) else MalformedResponseError(str(exc)))
            return
        except httptools.HttpParserError as exc:
            self._fail(MalformedResponseError(f"malformed HTTP response: {exc}"))
            return
        if not self._headers_done and self._received > self._pool.max_header_bytes and not waiter.done():
            self._fail(MalformedResponseError(
                f"the response's status line and headers exceed {self._pool.max_header_bytes} bytes"
            ))

    # ----- httptools callbacks -----

    def on_message_begin(self) -> None:
        if self._complete:  # a second response in the same bytes as the first: never reuse
            self._keep_alive = False

    def on_status(self, status: bytes) -> None:
        pass

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self._pool.max_header_bytes:
            raise MalformedResponseError(
                f"the response's status line and headers exceed {self._pool.max_header_bytes} bytes"
            )
        self._header_count += 1
        if self._header_count > self._pool.max_headers:
            raise MalformedResponseError(f"the response has more than {self._pool.max_headers} header fields")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "content-length":
            try:
                length = int(text)
            except ValueError:
                raise MalformedResponseError(f"invalid Content-Length {text[:40]!r}") from None
            if self._length is not None and self._length != length:
                raise MalformedResponseError("conflicting Content-Length headers")
            self._length = length
        elif key == "transfer-encoding":
            self._chunked = "chunked" in text.lower()
        elif key == "content-encoding":
            self._encoding = text.strip().lower()
        if key not in self._headers:
            self._headers[key] = text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            return  # an interim response; the real one follows
        self._status = status
        self._headers_done = True
        self._keep_alive = self._parser.should_keep_alive()
        if self._length is not None and self._length > self._cap:
            raise BodyTooLargeError(
                status, f"response body of {self._length} bytes exceeds the {self._cap}-byte cap (max_response_bytes)"
            )

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._cap:
            raise BodyTooLargeError(self._status, f"response body exceeds the {self._cap}-byte cap (max_response_bytes)")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if not self._headers_done:  # the end of an interim (1xx) response: start over
            self._headers = {}
            self._header_bytes = 0
            self._header_count = 0
            self._length = None
            self._chunked = False
            self._encoding = None
            return
        self._finish()

    # ----- the pool's side -----

    def start(self, waiter: asyncio.Future[Any], cap: int) -> None:
        """Prepare to read the response to the request about to be written."""
        self._waiter = waiter
        self._cap = cap
        self._parser = httptools.HttpResponseParser(self)
        self._complete = False
        self._received = 0
        self._header_bytes = 0
        self._header_count = 0
        self._headers: dict[str, str] = {}
        self._headers_done = False
        self._status = 0
        self._length: int | None = None
        self._chunked = False
        self._encoding: str | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._keep_alive = False

    @property
    def reusable(self) -> bool:
        return self._complete and self._keep_alive and not self.closed

    def close(self) -> None:
        """Close the connection (in-flight bytes are dropped)."""
        if not self.closed:
            self.closed = True
            self._pool._forget(self)
            if self.transport is not None:
                self.transport.abort()

    def _finish(self) -> None:
        self._complete = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        if self._encoding in ("gzip", "x-gzip", "deflate"):
            try:
                body = _decompress(body, self._encoding, self._cap)
            except BodyTooLargeError as exc:
                exc.status = self._status
                self._keep_alive = False
                waiter.set_exception(exc)
                return
            except zlib.error as exc:
                self._keep_alive = False
                waiter.set_exception(MalformedResponseError(f"cannot decode the {self._encoding} response body: {exc}"))
                return
        waiter.set_result((self._status, self._headers, body))

    def _fail(self, exc: BaseException) -> None:
        self._complete = True
        self._keep_alive = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()


def _decompress(body: bytes, encoding: str, cap: int) -> bytes:
    # gzip: wbits 16 + MAX_WBITS; deflate: zlib-wrapped (RFC 9110), raw deflate as servers also send it
    if encoding == "deflate" and body[:1] and (body[0] & 0x0F) != 8:
        decoder = zlib.decompressobj(-zlib.MAX_WBITS)
    else:
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS)
    out = decoder.decompress(body, cap + 1)
    if len(out) > cap or decoder.unconsumed_tail:
        raise BodyTooLargeError(0, f"response body exceeds the {cap}-byte cap (max_response_bytes) once decompressed")
    return out + decoder.flush()


class ConnectionPool:
    """Keep-alive connections to one ``host:port`` for one event loop.

    The caller bounds requests in flight (``ModelClient``'s connection semaphore), so the pool never
    holds more sockets than the most requests ever in flight together: a new connection is opened
    only when no idle one is left. Idle connections are kept for :data:`KEEPALIVE_S` seconds, the
    most recently used first.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_headers: int = DEFAULT_MAX_HEADERS,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.host = host
        self.port = port
        self.max_header_bytes = max_header_bytes
        self.max_headers = max_headers
        self.keepalive_s = keepalive_s
        self._loop = asyncio.get_running_loop()
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections whose socket is open (idle or carrying a request)."""
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def request(self, data: bytes, cap: int) -> tuple[int, dict[str, str], bytes]:
        """Write one request (head and body, already encoded) and read its response:
        ``(status, headers with lower-case names, body)``. Raises :class:`TransportError`,
        :class:`BodyTooLargeError` or ``OSError`` (connecting)."""
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        conn = self._take()
        if conn is None:
            conn = await self._connect()
        loop = self._loop
        waiter = loop.create_future()
        conn.start(waiter, cap)
        transport = conn.transport
        assert transport is not None
        try:
            transport.write(data)
            result = await waiter
        except BaseException:
            conn.close()  # failed, timed out or cancelled mid-response: its framing is unknown
            raise
        if conn.reusable and not self._closed:
            conn.idle_since = loop.time()
            self._idle.append(conn)
            if self._sweeper is None:
                self._sweeper = loop.call_later(self.keepalive_s, self._sweep)
        else:
            conn.close()
        return result

    async def _connect(self) -> _Connection:
        conn = _Connection(self)
        # the addresses of the host one after the other (no happy eyeballs: its racing tasks outlive
        # a request cancelled while connecting, and model servers are on a loopback or a LAN)
        await self._loop.create_connection(lambda: conn, self.host, self.port)
        if self._closed:
            conn.close()
            raise RuntimeError("the connection pool is closed")
        self._open.add(conn)
        return conn

    def _take(self) -> _Connection | None:
        idle = self._idle
        if not idle:
            return None
        oldest = self._loop.time() - self.keepalive_s
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.idle_since > oldest:
                return conn
            conn.close()
        return None

    def _sweep(self) -> None:
        """Close connections idle past the keep-alive time (so idle sockets do not linger)."""
        self._sweeper = None
        oldest = self._loop.time() - self.keepalive_s
        keep = []
        for conn in self._idle:
            if conn.closed or conn.idle_since <= oldest:
                conn.close()
            else:
                keep.append(conn)
        self._idle = keep
        if keep:
            self._sweeper = self._loop.call_later(self.keepalive_s, self._sweep)

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)

    async def close(self) -> None:
        """Close every connection (safe to call twice); the sockets close on the loop's next turn."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._idle.clear()
        for conn in list(self._open):
            conn.close()

    def abandon(self) -> None:
        """Close the sockets of a pool whose event loop has finished (it cannot run callbacks any
        more, so the sockets are closed directly instead of through their transports)."""
        self._closed = True
        self._sweeper = None
        self._idle.clear()
        for conn in list(self._open):
            conn.closed = True
            transport = conn.transport
            sock = getattr(transport, "_sock", None)
            try:
                if sock is not None:
                    sock.close()
                    transport._sock = None  # type: ignore[union-attr]
            except Exception:  # asyncio internals: never fail the caller over cleanup
                pass
        self._open.clear()

"""The model client's lean HTTP/1.1 transport (``verifiers/clients/http11.py``) against real loopback
servers: the ScriptedServer, and a raw asyncio server in this file that answers each request with
whatever bytes a test writes (oversize headers, endless bodies, broken chunk sizes, a close
mid-body, HTTP/1.0, 429 + Retry-After, a slow drip ...).

Every hostile case must end in one clear ``ModelError``, nothing may hang (each call is bounded by
``asyncio.wait_for`` far above what it needs), and no connection may leak: after ``aclose()`` the
pool holds no socket and the server has seen every connection closed.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Awaitable, Callable

import pytest

from verifiers.clients import ModelClient, ModelError, ModelTimeoutError
from verifiers.testing import ScriptedServer, reply

MSGS = [{"role": "user", "content": "What is 2+2?"}]
STUCK = 60.0  # only reached when the code under test hangs; never a statement about speed


def completion(content: str = "4") -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    ).encode()


def ok(body: bytes | None = None, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    body = completion() if body is None else body
    return b"HTTP/%s 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        version, len(body), extra, body,
    )  # fmt: skip


Handler = Callable[[int, dict[str, str], asyncio.StreamWriter], Awaitable[bool]]


class RawServer:
    """Reads each HTTP/1.1 request (headers + Content-Length body) and hands the writer to
    ``handler(n, headers, writer)`` (``n`` counts requests from 0); the handler writes any bytes and
    returns whether to keep reading requests on the connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests = 0
        self.connections = 0
        self.open = 0
        self.heads: list[bytes] = []
        self._readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self._server: asyncio.Server | None = None
        self.base_url = ""

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self._readers[writer] = reader
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed the connection
                self.heads.append(head)
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                await reader.readexactly(int(headers.get("content-length", "0")))
                n = self.requests
                self.requests += 1
                try:
                    keep = await self.handler(n, headers, writer)
                    await writer.drain()
                except ConnectionError:
                    return
                if not keep:
                    return
        finally:
            self.open -= 1
            self._readers.pop(writer, None)
            writer.close()

    async def client_gone(self, writer: asyncio.StreamWriter, within: float) -> bool:
        """Wait (at most ``within`` s) until the client closes this connection; for a handler that
        stalls on purpose and then returns False."""
        try:
            await asyncio.wait_for(self._readers[writer].read(), within)
        except (TimeoutError, ConnectionError):
            return False
        return True

    async def all_closed(self) -> None:
        """Wait until the server has seen every connection closed."""
        deadline = time.monotonic() + STUCK
        while self.open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert self.open == 0, f"{self.open} connections still open on the server"


def client_for(base_url: str, **kw) -> ModelClient:
    kw.setdefault("backoff_initial", 0.001)
    kw.setdefault("backoff_max", 0.01)
    kw.setdefault("max_retries", 0)
    client = ModelClient(base_url=base_url, **kw)
    assert client.transport == "lean"
    return client


async def chat(client: ModelClient):
    return await asyncio.wait_for(client.chat(model="m", messages=MSGS), STUCK)


async def closed(client: ModelClient, srv: RawServer | None = None) -> None:
    """Close the client; its pool must hold no socket, and the server must see them all closed."""
    pool = client._pool
    await client.aclose()
    if pool is not None:
        assert pool.open_connections == 0
    if srv is not None:
        await srv.all_closed()


# ----- which transport -------------------------------------------------------------------------


def test_transport_choice(monkeypatch):
    assert ModelClient(base_url="http://127.0.0.1:8000/v1").transport == "lean"
    assert ModelClient(base_url="http://[::1]:8000/v1").transport == "lean"
    assert ModelClient(base_url="http://vllm.internal/v1", headers={"X-Run": "a"}).transport == "lean"
    for url in ("https://api.openai.com/v1", "http://u:p@h/v1", "http://h/v1?api-version=1", "http://h/v 1"):
        assert ModelClient(base_url=url).transport == "aiohttp", url
    # headers the lean transport writes itself, or cannot write as given
    assert ModelClient(base_url="http://h/v1", headers={"Accept-Encoding": "br"}).transport == "aiohttp"
    assert ModelClient(base_url="http://h/v1", headers={"Host": "other"}).transport == "aiohttp"
    assert ModelClient(base_url="http://h/v1", headers={"X-Bad": "a\r\nb"}).transport == "aiohttp"
    monkeypatch.setenv("VF_HTTP_TRANSPORT", "aiohttp")
    assert ModelClient(base_url="http://127.0.0.1:8000/v1").transport == "aiohttp"


# ----- a well-behaved server ---------------------------------------------------------------------


async def test_requests_reuse_one_keepalive_connection_and_send_the_clients_headers():
    with ScriptedServer(reply("four")) as srv:
        client = client_for(srv.base_url, api_key="sk-1", headers={"X-Run": "r1"})
        for _ in range(5):
            assert (await chat(client)).content == "four"
        assert client._pool.open_connections == 1
        await asyncio.wait_for(
            client.chat(model="m", messages=MSGS, sampling_args={"extra_headers": {"X-Run": "r2"}, "extra_query": {"a b": "c/d"}}),
            STUCK,
        )
        await closed(client)
    first, last = srv.requests[0], srv.requests[-1]
    assert first.headers["authorization"] == "Bearer sk-1" and first.headers["x-run"] == "r1"
    assert first.headers["content-type"] == "application/json" and first.headers["accept"] == "application/json"
    assert last.headers["x-run"] == "r2"  # a per-request header overrides the client's


async def test_gzip_body_and_http10_without_keepalive():
    async def handler(n, headers, writer):
        if n != 1:  # compressed (the client advertises gzip, as aiohttp did)
            assert "gzip" in headers["accept-encoding"]
            writer.write(ok(gzip.compress(completion("zipped")), b"Content-Encoding: gzip\r\n"))
            return True
        # HTTP/1.0, no length: the body ends when the server closes the connection
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + completion("old"))
        return False

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url)
        assert (await chat(client)).content == "zipped"
        assert (await chat(client)).content == "old"
        assert client._pool.open_connections == 0  # never kept after an HTTP/1.0 response
        assert (await chat(client)).content == "zipped"  # a fresh connection
        await closed(client, srv)
    assert srv.connections == 2


async def test_connection_close_and_unasked_bytes_are_never_reused():
    async def handler(n, headers, writer):
        if n == 0:
            writer.write(ok(extra=b"Connection: close\r\n"))
            return False
        writer.write(ok() + b"HTTP/1.1 200 OK\r\n")  # a second, unasked response after the first
        return True

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url)
        await chat(client)
        await chat(client)
        await asyncio.sleep(0.05)
        await chat(client)
        await closed(client, srv)
    assert srv.connections == 3


# ----- hostile servers ---------------------------------------------------------------------------


def raw_answer(data: bytes, keep: bool = False) -> Handler:
    async def handler(n, headers, writer):
        writer.write(data)
        return keep

    return handler


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", "exceed 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"Content-Length: 2\r\n\r\n{}", "more than 128 header"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}", "malformed HTTP response"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "malformed HTTP response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", "malformed HTTP response"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", "malformed HTTP response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"a": 1', "before the response was complete"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":", "before the response was complete"),
    ],
    ids=[
        "oversize-header", "header-count", "bad-status", "not-http", "bad-chunk-size", "chunk-size-overflow",
        "conflicting-length", "close-mid-body", "close-mid-chunk",
    ],
)
async def test_malformed_responses_are_clear_transient_errors(data, message):
    async with RawServer(raw_answer(data)) as srv:
        client = client_for(srv.base_url, max_retries=1)
        with pytest.raises(ModelError) as info:
            await chat(client)
        await closed(client, srv)
    err = info.value
    assert err.status is None and err.transient and err.attempts == 2 and srv.requests == 2
    assert err.message.startswith(f"connection error talking to {srv.base_url}/chat/completions: ")
    assert message in err.message


async def test_body_caps_declared_endless_and_decompressed():
    async def endless(n, headers, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(10_000):  # bounded: far past the cap, stops once the client has gone
            writer.write(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0)
        return False

    cases = [
        (raw_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n"), "of 10000000000 bytes exceeds the 65536-byte cap"),
        (endless, "exceeds the 65536-byte cap"),
        (raw_answer(ok(gzip.compress(b" " * 10_000_000), b"Content-Encoding: gzip\r\n")), "once decompressed"),
        (raw_answer(b"HTTP/1.1 200 OK\r\n\r\n" + b"y" * 100_000), "exceeds the 65536-byte cap"),  # until close
    ]  # fmt: skip
    for handler, message in cases:
        async with RawServer(handler) as srv:
            client = client_for(srv.base_url, max_response_bytes=65536, max_retries=3)
            with pytest.raises(ModelError) as info:
                await chat(client)
            await closed(client, srv)
        assert info.value.status == 200 and not info.value.transient, message  # never retried
        assert message in info.value.message and srv.requests == 1


async def test_429_retry_after_then_success_on_the_same_connection():
    async def handler(n, headers, writer):
        if n == 0:
            body = b'{"error": {"message": "slow down", "code": "rate_limited"}}'
            writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0.3\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        else:
            writer.write(ok())
        return True

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url, max_retries=2, backoff_max=5.0)
        start = time.monotonic()
        assert (await chat(client)).content == "4"
        assert time.monotonic() - start >= 0.29  # the server's Retry-After, not the 1 ms backoff
        await closed(client, srv)
    assert srv.requests == 2 and srv.connections == 1


async def test_error_status_is_a_model_error_with_the_servers_message():
    body = b'{"error": {"message": "maximum context length is 8 tokens", "code": "context_length_exceeded"}}'
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    async with RawServer(raw_answer(answer, keep=True)) as srv:
        client = client_for(srv.base_url, max_retries=3)
        with pytest.raises(ModelError) as info:
            await chat(client)
        assert client._pool.open_connections == 1  # a complete error response leaves it reusable
        await closed(client, srv)
    assert (info.value.status, info.value.code, info.value.transient) == (400, "context_length_exceeded", False)
    assert info.value.message == "maximum context length is 8 tokens"


async def test_slow_drip_and_silence_end_at_the_clients_timeout():
    async def drip(n, headers, writer):
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 400:  # bounded: 20 s at most
            writer.write(bytes([byte]))
            await writer.drain()
            if await srv.client_gone(writer, 0.05):
                break
        return False

    async def silent(n, headers, writer):
        await srv.client_gone(writer, 20)  # bounded; the client gives up long before
        return False

    for handler in (drip, silent):
        async with RawServer(handler) as srv:
            client = client_for(srv.base_url, timeout=0.5, max_retries=1)
            start = time.monotonic()
            with pytest.raises(ModelTimeoutError) as info:
                await chat(client)
            assert time.monotonic() - start < STUCK
            await closed(client, srv)
        assert info.value.attempts == 2 and info.value.transient and srv.requests == 2
        assert "no response within 0.5s" in info.value.message


async def test_a_server_that_closes_before_answering_is_retried_at_once():
    async def handler(n, headers, writer):
        if n == 0:
            return False  # closes without a byte: a stale keep-alive connection, as far as the client knows
        writer.write(ok())
        return True

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url, max_retries=1, backoff_initial=30.0, backoff_max=30.0)
        start = time.monotonic()
        assert (await chat(client)).content == "4"
        assert time.monotonic() - start < 10  # not the 30 s backoff
        await closed(client, srv)


async def test_cancelled_requests_close_their_connections():
    release = asyncio.Event()

    async def handler(n, headers, writer):
        await asyncio.wait_for(release.wait(), STUCK)
        writer.write(ok())
        return True

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url)
        tasks = [asyncio.ensure_future(chat(client)) for _ in range(8)]
        while srv.requests < 8:
            await asyncio.sleep(0.01)
        assert client._pool.open_connections == 8
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert client._pool.open_connections == 0  # a half-read connection is never pooled
        release.set()
        await srv.all_closed()
        assert (await chat(client)).content == "4"
        await closed(client, srv)


async def test_max_connections_bounds_open_sockets():
    gate = asyncio.Event()

    async def handler(n, headers, writer):
        if n < 3:
            await asyncio.wait_for(gate.wait(), STUCK)
        writer.write(ok())
        return True

    async with RawServer(handler) as srv:
        client = client_for(srv.base_url, max_connections=3)
        tasks = [asyncio.ensure_future(chat(client)) for _ in range(12)]
        while srv.requests < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert srv.requests == 3 and client._pool.open_connections == 3
        gate.set()
        assert [r.content for r in await asyncio.gather(*tasks)] == ["4"] * 12
        assert srv.connections == 3
        await closed(client, srv)

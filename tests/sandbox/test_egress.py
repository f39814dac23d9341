"""Network granted to one sandboxed run through `EgressProxy`: the allowed host and nothing else.

Two HTTP servers on the host's loopback: ``allowed`` is granted, ``forbidden`` (think: the hub, or
the database) is not. Inside bubblewrap, through the relay, a client reaches the first, is refused
the second (and the proxy records it), and cannot reach either directly; once the proxy is closed
the grant is gone.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from verifiers.sandbox import Sandbox
from verifiers.sandbox.egress import RELAY, EgressProxy

FETCH = r"""
import sys, urllib.request, socket
proxy = urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"})
opener = urllib.request.build_opener(proxy)
for port in sys.argv[1:]:
    try:
        body = opener.open(f"http://127.0.0.1:{port}/hello", timeout=10).read().decode()
        print("proxied", port, body)
    except Exception as exc:
        print("proxied-refused", port, type(exc).__name__, getattr(exc, "code", ""))
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=3).close()
        print("direct", port, "connected")
    except OSError as exc:
        print("direct-refused", port, type(exc).__name__)
"""

SCRIPT = """
/usr/bin/python3 -I relay.py /workspace/.egress.sock 3128 > relay.log 2>&1 &
for _ in $(seq 100); do grep -q ready relay.log 2>/dev/null && break; sleep 0.05; done
/usr/bin/python3 -I fetch.py "$@"
"""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_port}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    made = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in made]
    for t in threads:
        t.start()
    try:
        yield made[0].server_port, made[1].server_port
    finally:
        for s in made:
            s.shutdown()
            s.server_close()


async def test_a_run_reaches_only_the_allowed_host(servers: tuple[int, int]) -> None:
    allowed, forbidden = servers
    sandbox = Sandbox("bwrap", timeout=60)
    files = {"relay.py": RELAY, "fetch.py": FETCH, "run.sh": SCRIPT}
    async with sandbox.session(files=files) as session:
        proxy = EgressProxy(session.workdir / ".egress.sock", {("127.0.0.1", allowed)})
        async with proxy:
            r = await session.run(f"bash run.sh {allowed} {forbidden}")
        out = r.stdout
        assert f"proxied {allowed} hello from {allowed}" in out, (out, r.stderr)
        assert f"proxied-refused {forbidden} HTTPError 403" in out, out
        assert f"hello from {forbidden}" not in out
        assert f"direct-refused {allowed}" in out and f"direct-refused {forbidden}" in out, out
        assert proxy.denied == [f"127.0.0.1:{forbidden}"]
        # the grant ends with the proxy
        after = await session.run(f"bash run.sh {allowed}")
        assert f"hello from {allowed}" not in after.stdout, after.stdout
        assert f"proxied-refused {allowed}" in after.stdout


async def test_the_proxy_refuses_what_is_not_a_plain_fetch(servers: tuple[int, int]) -> None:
    """CONNECT to a host not granted, a POST, an oversized request head: each refused, none forwarded."""
    import asyncio
    import tempfile
    from pathlib import Path

    allowed, forbidden = servers
    with tempfile.TemporaryDirectory(prefix="egress-") as tmp:
        proxy = EgressProxy(Path(tmp) / "p.sock", {("127.0.0.1", allowed)})
        async with proxy:

            async def ask(raw: bytes) -> bytes:
                reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
                writer.write(raw)
                await writer.drain()
                data = await reader.read(4096)
                writer.close()
                return data

            assert (await ask(f"CONNECT 127.0.0.1:{forbidden} HTTP/1.1\r\n\r\n".encode())).startswith(b"HTTP/1.1 403")
            assert (await ask(f"CONNECT 127.0.0.1:{allowed} HTTP/1.1\r\n\r\n".encode())).startswith(b"HTTP/1.1 200")
            post = f"POST http://127.0.0.1:{allowed}/x HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode()
            assert (await ask(post)).startswith(b"HTTP/1.1 405")
            huge = b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nX: " % allowed + b"a" * 70000 + b"\r\n\r\n"
            assert b"hello" not in await ask(huge)
        assert not proxy.socket_path.exists()

"""Network for one sandboxed run, to an allow-list of hosts only: an HTTP proxy on a unix socket.

A sandbox has a network namespace of its own (loopback only), so nothing inside can reach the host's
network: not the internet, and not the host's loopback services (the hub, its database). When a run
must fetch something (a check worker's setup phase installs an environment's dependencies from the
package registry), the host grants it this and nothing more:

* `EgressProxy` listens on a unix socket inside the run's work dir (the one host path the sandbox
  sees). It speaks just enough HTTP proxy: ``CONNECT host:port`` (HTTPS, the TLS stays end to end)
  and absolute-form ``GET``/``HEAD`` of ``http://host:port/...``, and only to the ``(host, port)``
  pairs it was given; anything else is answered 403 and recorded in `denied`. It connects from the
  host, so DNS is the host's; the sandbox never resolves a name.
* `RELAY` is a small program run inside the sandbox (by the sandbox's own Python) that listens on
  the sandbox's loopback and hands every connection to that socket, so ordinary clients inside work
  with ``--proxy http://127.0.0.1:PORT`` / ``HTTPS_PROXY``.

The grant lasts as long as the proxy: close it and the socket is dead, even if the run left its
relay behind. Connections, bytes and idle time are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from verifiers.utils.async_utils import wait_for

__all__ = ["RELAY", "EgressProxy", "LoopbackForward", "hosts_of"]

MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 16
IDLE_TIMEOUT_S = 60.0

# Runs inside the sandbox: 127.0.0.1:PORT -> the proxy's unix socket. argv: socket path, port.
RELAY = r"""
import socket, sys, threading
path, port = sys.argv[1], int(sys.argv[2])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
print("relay ready", flush=True)

def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

while True:
    client, _ = srv.accept()
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        client.close()
        continue
    threading.Thread(target=pipe, args=(client, up), daemon=True).start()
    threading.Thread(target=pipe, args=(up, client), daemon=True).start()
"""


def hosts_of(urls: Iterable[str]) -> set[tuple[str, int]]:
    """The ``(host, port)`` pairs of some URLs (the default port of their scheme when none is given)."""
    out = set()
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        out.add((parts.hostname.lower(), parts.port or (443 if parts.scheme == "https" else 80)))
    return out


class EgressProxy:
    """An HTTP proxy on ``socket_path`` that reaches ``allowed`` ``(host, port)`` pairs only.

    Use ``async with EgressProxy(...)``; ``denied`` lists the ``host:port`` targets refused."""

    def __init__(self, socket_path: Path, allowed: set[tuple[str, int]], *, uid: int | None = None) -> None:
        self.socket_path = Path(socket_path)
        self.allowed = {(h.lower(), int(p)) for h, p in allowed}
        self.uid = uid
        self.denied: list[str] = []
        self.bytes_in = 0
        self._server: asyncio.AbstractServer | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> EgressProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if len(os.fsencode(self.socket_path)) > 100:
            raise OSError(f"the proxy socket path is too long for a unix socket: {self.socket_path}")
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        # The sandbox's uid (65534 when the host is root) must be able to connect; the socket lies in
        # the run's own work dir, which nothing else can reach.
        os.chmod(self.socket_path, 0o666)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self._slots.locked():
                await _answer(writer, 503, "too many connections")
                return
            async with self._slots:
                await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT_S)
        if len(head) > MAX_HEAD_BYTES:
            await _answer(writer, 431, "request head too large")
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _version = lines[0].split(" ")
        except ValueError:
            await _answer(writer, 400, "bad request line")
            return
        if method == "CONNECT":
            host, _, port_s = target.rpartition(":")
            host = host.strip("[]").lower()
            if not port_s.isdigit() or (host, int(port_s)) not in self.allowed:
                self.denied.append(target[:200])
                await _answer(writer, 403, f"{target[:200]} is not an allowed host for this sandboxed run")
                return
            up_r, up_w = await wait_for(asyncio.open_connection(host, int(port_s)), IDLE_TIMEOUT_S)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._pipe_both(reader, writer, up_r, up_w)
            return
        if method not in ("GET", "HEAD"):
            await _answer(writer, 405, "only CONNECT, GET and HEAD pass this proxy")
            return
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            await _answer(writer, 400, "an absolute http:// URL is needed (use CONNECT for https)")
            return
        where = (parts.hostname.lower(), parts.port or 80)
        if where not in self.allowed:
            self.denied.append(f"{where[0]}:{where[1]}")
            await _answer(writer, 403, f"{where[0]}:{where[1]} is not an allowed host for this sandboxed run")
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [
            line
            for line in lines[1:]
            if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
        ]
        up_r, up_w = await wait_for(asyncio.open_connection(*where), IDLE_TIMEOUT_S)
        up_w.write((f"{method} {path} HTTP/1.1\r\n" + "\r\n".join([*headers, "Connection: close"]) + "\r\n\r\n").encode("latin-1"))
        await up_w.drain()
        await self._pipe_both(reader, writer, up_r, up_w)

    async def _pipe_both(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: bool) -> None:
            try:
                while data := await wait_for(src.read(65536), IDLE_TIMEOUT_S):
                    if count:
                        self.bytes_in += len(data)
                    dst.write(data)
                    await dst.drain()
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        try:
            await asyncio.gather(pipe(reader, up_w, False), pipe(up_r, writer, True))
        finally:
            with contextlib.suppress(Exception):
                up_w.close()


class LoopbackForward:
    """One host loopback port, reachable from one sandboxed run: a unix socket at ``socket_path``
    (in the run's work dir) whose every connection is piped to ``127.0.0.1:port`` on the host.

    With `RELAY` inside forwarding the sandbox's own ``127.0.0.1:port`` to the socket, a program in
    the sandbox reaches the host service at the very URL the host uses (an agent program reaching
    the interception proxy), and nothing else: no other port, host or name. Use ``async with``;
    closing it ends the grant (the socket is removed, open connections are cut)."""

    def __init__(self, socket_path: Path, port: int, *, max_connections: int = 64) -> None:
        if not 0 < int(port) < 65536:
            raise ValueError(f"not a port: {port!r}")
        self.socket_path = Path(socket_path)
        self.port = int(port)
        self.connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> LoopbackForward:
        if len(os.fsencode(self.socket_path)) > 100:
            raise OSError(f"the forward socket path is too long for a unix socket: {self.socket_path}")
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o666)  # the sandbox's uid connects; the folder is the run's own
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self._slots.locked():
                return
            async with self._slots:
                self.connections += 1
                up_r, up_w = await wait_for(asyncio.open_connection("127.0.0.1", self.port), IDLE_TIMEOUT_S)
                await _splice(reader, writer, up_r, up_w)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter) -> None:
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:
            with contextlib.suppress(Exception):
                if dst.can_write_eof():
                    dst.write_eof()

    try:
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
    finally:
        with contextlib.suppress(Exception):
            up_w.close()


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} Refused\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(Exception):
        await writer.drain()

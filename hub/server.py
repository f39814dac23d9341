"""Connection-level limits of the hub's HTTP server: uvicorn's httptools protocol, bounded.

uvicorn times out only an idle kept-alive connection. A connection that opens and sends nothing, or
sends its request head a byte at a time (slowloris), is held forever; with httptools nothing bounds
the size of a request head (uvicorn buffers the URL and headers as they come; h11 has
``h11_max_incomplete_event_size``, which ``hub serve`` sets as well); and any one address may open as
many connections as the worker has file descriptors. This protocol adds, per connection:

* a head deadline: the request line and headers must be complete within ``header_timeout_seconds``
  of the connection opening (or, on a kept-alive connection, of the first read of the next request's
  head), else 408 and the connection closes;
* a head size bound: about ``max_header_bytes`` (checked per read, so at most one read more), else 431;
* a cap of ``max_connections_per_client`` open connections per client address in this worker (429
  beyond); addresses named by ``forwarded_allow_ips`` (the reverse proxy) are exempt, since every
  client arrives through them;
* ``scope["vf.abort"]``, which lets the ASGI middleware drop a connection whose client stopped reading
  (a plain close would first wait for the client to take the buffered response).

The request body's bounds and timeouts are the ASGI middleware's (``hub.app.LimitsAndLogs``). Selected
with ``uvicorn.run(..., http="hub.server:HubHttpProtocol")`` by ``hub serve``.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    max_header_bytes: int
    max_per_client: int
    exempt: tuple[Any, ...]  # ip_network objects, or ("*",) for every address

    @classmethod
    def from_settings(cls) -> ConnectionLimits:
        from hub.settings import Settings

        s = Settings()
        exempt: list[Any] = []
        for item in (s.forwarded_allow_ips or "").split(","):
            item = item.strip()
            if item == "*":
                exempt = ["*"]
                break
            if item:
                try:
                    exempt.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    pass  # uvicorn accepts host names there too; they never match a peer address
        return cls(s.header_timeout_seconds, s.max_header_bytes, s.max_connections_per_client, tuple(exempt))

    def is_exempt(self, host: str) -> bool:
        if not self.exempt:
            return False
        if self.exempt[0] == "*":
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(addr in net for net in self.exempt)


_limits: ConnectionLimits | None = None
_open_by_client: dict[str, int] = {}  # this worker's open connections per client address


def limits() -> ConnectionLimits:
    """The limits, read once per worker process from the hub's settings (``VF_HUB_*``)."""
    global _limits
    if _limits is None:
        _limits = ConnectionLimits.from_settings()
    return _limits


def _plain_response(code: int, reason: str, detail: str) -> bytes:
    import json

    body = json.dumps({"detail": detail}).encode()
    return (
        f"HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


class HubHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head deadline, a head size bound and a per-address cap."""

    _vf_client: str | None = None
    _vf_timer: asyncio.TimerHandle | None = None
    _vf_in_head = False
    _vf_head_bytes = 0
    _vf_refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        lim = limits()
        host = self.client[0] if self.client else None
        if host is not None and not lim.is_exempt(host):
            n = _open_by_client.get(host, 0)
            if n >= lim.max_per_client:
                # Answer at once, and close when the request arrives (its bytes read, so the close is a
                # clean FIN the client can read the answer before) or after a second at most.
                self._vf_refused = True
                transport.write(
                    _plain_response(429, "Too Many Requests", "too many open connections from your address")
                )
                self._vf_timer = self.loop.call_later(min(1.0, lim.header_timeout), self._vf_close)
                return
            _open_by_client[host] = n + 1
            self._vf_client = host
        self._vf_in_head = True
        self._vf_arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._vf_disarm()
        host, self._vf_client = self._vf_client, None
        if host is not None:
            left = _open_by_client.pop(host, 1) - 1
            if left > 0:
                _open_by_client[host] = left
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._vf_refused:
            self._vf_close()
            return
        if self._vf_in_head:
            self._vf_head_bytes += len(data)
        super().data_received(data)
        if self._vf_in_head:
            if self._vf_head_bytes > limits().max_header_bytes:
                self._vf_answer_and_close(431, "Request Header Fields Too Large", "request head too large")
            else:
                # Armed only for a head that did not arrive in one read: a request whose head comes in
                # one packet (nearly all) never costs a timer.
                self._vf_arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["vf.abort"] = self.transport.abort  # type: ignore[typeddict-unknown-key]
        self._vf_in_head = True

    def on_headers_complete(self) -> None:
        self._vf_in_head = False
        self._vf_head_bytes = 0
        self._vf_disarm()
        super().on_headers_complete()

    # -------------------------------------------------------------------------------- internals
    def _vf_arm(self) -> None:
        if self._vf_timer is None:  # the deadline runs from the head's first byte, never restarts
            self._vf_timer = self.loop.call_later(limits().header_timeout, self._vf_head_timeout)

    def _vf_disarm(self) -> None:
        if self._vf_timer is not None:
            self._vf_timer.cancel()
            self._vf_timer = None

    def _vf_head_timeout(self) -> None:
        self._vf_timer = None
        if self._vf_in_head:
            self._vf_answer_and_close(408, "Request Timeout", "request head too slow")

    def _vf_answer_and_close(self, code: int, reason: str, detail: str) -> None:
        if self.transport.is_closing():
            return
        self._vf_in_head = False
        self._vf_disarm()
        # Never write into a pipelined response still being sent; then the close says it all.
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_plain_response(code, reason, detail))
        self.transport.close()

    def _vf_close(self) -> None:
        self._vf_disarm()
        if not self.transport.is_closing():
            self.transport.close()

"""The env-server frames, shared by the server, the pool's broker and the client.

A client (ZMQ DEALER) sends ``[request_id, method, payload]``; the server's ROUTER sees the
client's identity in front: ``[client_id, request_id, method, payload]``. A server answers
``[client_id, request_id, kind, data]`` where ``kind`` is ``b"delta"`` (one trace delta of a
run, any number of them) or ``b"reply"`` (the request's one answer, always last). ``method`` is
``health``, ``run`` or ``cancel``; ``payload`` and ``data`` are msgpack maps (the request and
response models of :mod:`verifiers.v1.wire`). This is the original 0.4.0's layout, so either
side may be the original.
"""

from __future__ import annotations

from typing import Any

from verifiers.v1.wire import BaseResponse, pack

METHODS = (b"health", b"run", b"cancel")
DELTA, REPLY = b"delta", b"reply"
DEFAULT_ADDRESS = "tcp://127.0.0.1:5000"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""A request payload larger than this gets an error reply (the task data of one run)."""


def frame_cap(max_message_bytes: int) -> int:
    """The socket's ``zmq.MAXMSGSIZE``: a frame past twice the payload cap is refused by ZMQ
    itself as it arrives, before it is buffered whole (the sender is disconnected and sees no
    reply: its request times out, and its socket reconnects); a payload between the cap and
    that gets an error reply naming the cap."""
    return 2 * max_message_bytes + 4096

INFRA = "InfraError"
"""The error type of a run the serving machinery lost (its worker died): ``error_kind`` infra."""
BUSY = "ServerBusy"
"""The error of a run refused because the pool's queue is full (backpressure)."""


def error_reply(message: str, **fields: Any) -> bytes:
    return pack(BaseResponse(success=False, error=message).model_dump(mode="python") | fields)


def check_request(frames: list[bytes], max_bytes: int) -> tuple[bytes, bytes, bytes, bytes] | tuple[bytes, bytes, bytes]:
    """``(client_id, request_id, method, payload)`` of a well-formed request, else
    ``(client_id, request_id, error_data)``: the error reply to send back (a malformed frame, an
    unknown method, an oversized payload)."""
    client_id = frames[0]
    if len(frames) != 4:
        request_id = frames[1] if len(frames) > 1 and len(frames[1]) <= 128 else b""
        return client_id, request_id, error_reply(
            f"malformed request: expected [request_id, method, payload], got {len(frames) - 1} frames"
        )
    _, request_id, method, payload = frames
    if len(request_id) > 128:
        return client_id, request_id[:128], error_reply("malformed request: request_id longer than 128 bytes")
    if method not in METHODS:
        return client_id, request_id, error_reply(
            f"unknown method {method[:64].decode(errors='replace')!r} (one of health, run, cancel)"
        )
    if len(payload) > max_bytes:
        return client_id, request_id, error_reply(
            f"request too large: {len(payload)} bytes (this server takes at most {max_bytes})"
        )
    return client_id, request_id, method, payload

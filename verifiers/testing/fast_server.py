"""A minimal, fast OpenAI-compatible chat server for benchmarks.

``python -m verifiers.testing.fast_server --port P [--mode answer|tool]``

The rollout benchmark needs a server that is never the bottleneck, so that the numbers measure the
client library. This one speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies, pipelining)
on a raw asyncio protocol (uvloop when installed) and answers from pre-encoded bytes:

* ``auto`` mode (default): a request that offers tools and has no tool result yet gets a tool call
  (``--tool-name`` with ``--tool-args``); every other chat request gets the fixed answer. One server
  thus serves both a single-turn and a tool-using environment;
* ``answer`` mode: every chat completion gets the fixed answer;
* ``tool`` mode: a conversation without a tool message yet gets a tool call, one with a tool result
  gets the fixed answer.

A chat request with ``"stream": true`` gets the same reply as server-sent events (a delta chunk, a
final chunk with the finish reason and usage, then ``data: [DONE]``), in one write.

``/v1/completions`` answers with the fixed text, ``/v1/models`` lists one model, and ``GET /stats``
returns ``{"requests": N}`` (chat and completion requests so far) so that a benchmark can check that
each rollout really made the requests it claims. It prints ``READY <port>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
from typing import Any

_TOOL_ROLE = re.compile(rb'"role"\s*:\s*"tool"')
_HAS_TOOLS = re.compile(rb'"tools"\s*:\s*\[\s*\{')
_STREAM = re.compile(rb'"stream"\s*:\s*true')


class Stats:
    """Requests answered so far (shared by all connections)."""

    requests = 0


def _http(status: int, body: bytes) -> bytes:
    reason = {200: b"OK", 404: b"Not Found", 400: b"Bad Request"}.get(status, b"OK")
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % (status, reason, len(body))
        + body
    )


def _sse(status: int, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 %d OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"content-length: %d\r\n\r\n" % (status, len(body)) + body
    )


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def build_responses(model: str, answer: str, tool_name: str, tool_args: str) -> dict[str, bytes]:
    """Pre-encoded HTTP responses for every reply the server gives."""
    usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}

    def chat(message: dict[str, Any], finish: str) -> bytes:
        body = {
            "id": "chatcmpl-fast",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        }
        return _http(200, _json(body))

    def chat_stream(delta: dict[str, Any], finish: str) -> bytes:
        def event(choice: dict[str, Any], **extra: Any) -> bytes:
            chunk = {"id": "chatcmpl-fast", "object": "chat.completion.chunk", "created": 0, "model": model,
                     "choices": [choice], **extra}  # fmt: skip
            return b"data: " + _json(chunk) + b"\n\n"

        body = (
            event({"index": 0, "delta": delta, "finish_reason": None, "logprobs": None})
            + event({"index": 0, "delta": {}, "finish_reason": finish, "logprobs": None}, usage=usage)
            + b"data: [DONE]\n\n"
        )
        return _sse(200, body)

    call = {"id": "call_0", "type": "function", "function": {"name": tool_name, "arguments": tool_args}}
    stream_call = {"index": 0, **call}
    completion = {
        "id": "cmpl-fast",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "text": answer, "finish_reason": "stop", "logprobs": None}],
        "usage": usage,
    }
    models = {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "fast"}]}
    return {
        "answer": chat({"role": "assistant", "content": answer}, "stop"),
        "tool": chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"),
        "answer_stream": chat_stream({"role": "assistant", "content": answer}, "stop"),
        "tool_stream": chat_stream(
            {"role": "assistant", "content": None, "tool_calls": [stream_call]}, "tool_calls"
        ),
        "completion": _http(200, _json(completion)),
        "models": _http(200, _json(models)),
        "not_found": _http(404, _json({"error": {"message": "not found", "type": "invalid_request_error"}})),
    }


def _dechunk(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """Decode a chunked request body starting at ``start``: (body, end offset), or None if the
    buffer does not hold all of it yet."""
    parts = []
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            trailer_end = buf.find(b"\r\n\r\n", eol)
            if trailer_end == eol:  # no trailers: the terminating CRLF follows the size line
                return b"".join(parts), eol + 4
            if trailer_end < 0:
                return None
            return b"".join(parts), trailer_end + 4
        if len(buf) < eol + 2 + size + 2:
            return None
        parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
        pos = eol + 2 + size + 2


class FastProtocol(asyncio.Protocol):
    """One connection: parse requests out of the byte stream and answer each immediately."""

    __slots__ = ("buf", "mode", "responses", "transport")

    def __init__(self, responses: dict[str, bytes], mode: str) -> None:
        self.responses = responses
        self.mode = mode
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        out = []
        close = False
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(buf[:end]).lower()
            if b"\r\ntransfer-encoding: chunked" in head:
                parsed = _dechunk(buf, end + 4)
                if parsed is None:
                    break
                body, total = parsed
            else:
                length = 0
                pos = head.find(b"\r\ncontent-length:")
                if pos >= 0:
                    stop = head.find(b"\r\n", pos + 2)
                    length = int(head[pos + 17 : stop if stop >= 0 else len(head)].strip() or 0)
                total = end + 4 + length
                if len(buf) < total:
                    break
                body = bytes(buf[end + 4 : total])
            del buf[:total]
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            out.append(self.respond(path.split(b"?", 1)[0], body))
            if b"\r\nconnection: close" in head:
                close = True
                break
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
            if close:
                self.transport.close()

    def respond(self, path: bytes, body: bytes) -> bytes:
        r = self.responses
        if path.endswith(b"/chat/completions"):
            Stats.requests += 1
            mode = self.mode
            if (
                mode == "answer"
                or (mode == "auto" and not _HAS_TOOLS.search(body))
                or _TOOL_ROLE.search(body)
            ):
                reply = "answer"
            else:
                reply = "tool"
            return r[reply + "_stream"] if _STREAM.search(body) else r[reply]
        if path.endswith(b"/completions"):
            Stats.requests += 1
            return r["completion"]
        if path.endswith(b"/models"):
            return r["models"]
        if path.endswith(b"/stats"):
            return _http(200, _json({"requests": Stats.requests}))
        return r["not_found"]


async def serve(host: str, port: int, responses: dict[str, bytes], mode: str) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = await loop.create_server(lambda: FastProtocol(responses, mode), sock=sock, backlog=4096)
    actual = server.sockets[0].getsockname()[1]
    print(f"READY {actual}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as READY <port>)")
    parser.add_argument("--mode", choices=["auto", "answer", "tool"], default="auto")
    parser.add_argument("--model", default="fast-model")
    parser.add_argument("--answer", default="The answer is 4.")
    parser.add_argument("--tool-name", default="add")
    parser.add_argument("--tool-args", default='{"a": 2, "b": 2}')
    parser.add_argument("--no-uvloop", action="store_true", help="use the stdlib event loop")
    args = parser.parse_args(argv)
    responses = build_responses(args.model, args.answer, args.tool_name, args.tool_args)
    runner: Any = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(args.host, args.port, responses, args.mode))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()

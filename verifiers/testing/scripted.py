"""ScriptedServer: a real OpenAI-compatible HTTP server on loopback with scripted replies.

Tests of the SDK, the CLI and the training adapter talk to it over real sockets, so they exercise the
same client, retry and concurrency code as production runs against vLLM. It runs an aiohttp server in
a background thread with its own event loop, so it works from both sync and async tests.

A *script* decides each reply:

* ``None``: echo the last message's content;
* a fixed reply: a string, a :class:`Reply`, or a dict of Reply fields;
* a callable ``f(request: ScriptRequest) -> reply`` (may be async);
* a list: a queue consumed one reply per request; the last entry repeats once it is reached
  (``exhausted="error"`` answers 400 instead).

Replies may carry tool calls (also with malformed argument JSON), an HTTP error status with headers
(``Retry-After``), a delay, a raw body, or a dropped connection. A request with ``n`` > 1 gets ``n``
choices, the script being asked once per choice. Token ids and sampled logprobs come in vLLM's shapes
from a fake tokenizer with one token per character (token id = code point).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Reply:
    """One scripted answer.

    ``status`` other than 200 sends an OpenAI-style error body with ``error`` as its message.
    ``finish_reason`` defaults to ``"tool_calls"`` when there are tool calls, ``"length"`` when the
    request's ``max_tokens`` cut the content, else ``"stop"``. ``body`` (a JSON-able value, str or
    bytes) is sent verbatim instead of a completion. ``disconnect`` closes the socket without answering.
    """

    content: str | None = "ok"
    tool_calls: list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    finish_reason: str | None = None
    status: int = 200
    error: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: Any = None
    disconnect: bool = False
    usage: dict[str, int] | None = None


def reply(content: str | None = "ok", **kwargs: Any) -> Reply:
    """A plain assistant reply."""
    return Reply(content=content, **kwargs)


def tool_call(
    name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> dict[str, Any]:
    """One OpenAI tool call; a str ``arguments`` is sent verbatim (use it for malformed JSON)."""
    if arguments is None:
        arguments = {}
    args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
    return {"id": id or "", "type": "function", "function": {"name": name, "arguments": args}}


def tool_calls(*calls: dict[str, Any], content: str | None = None, **kwargs: Any) -> Reply:
    """An assistant reply that calls tools (build each with :func:`tool_call`)."""
    return Reply(content=content, tool_calls=list(calls), **kwargs)


def error(
    status: int, message: str | None = None, *, retry_after: float | str | None = None, **kwargs: Any
) -> Reply:
    """An HTTP error reply, optionally with a ``Retry-After`` header (seconds)."""
    headers = dict(kwargs.pop("headers", {}) or {})
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return Reply(
        content=None, status=status, error=message or f"scripted error {status}", headers=headers, **kwargs
    )


def disconnect() -> Reply:
    """Close the connection without an answer (the client sees a connection error)."""
    return Reply(content=None, disconnect=True)


def by_turn(*replies: Any) -> Callable[[ScriptRequest], Any]:
    """A script choosing the reply by the number of assistant turns already in the conversation.

    Works at any concurrency (unlike a queue shared by all rollouts): ``by_turn(tool_calls(...),
    "final answer")`` calls a tool on every conversation's first turn and answers on the second. Past
    the end, the last reply repeats.
    """
    if not replies:
        raise ValueError("by_turn needs at least one reply")

    def choose(request: ScriptRequest) -> Any:
        index = min(request.turn, len(replies) - 1)
        chosen = replies[index]
        return chosen(request) if callable(chosen) else chosen

    return choose


def echo(request: ScriptRequest) -> Reply:
    """Reply with the last message's content (or the prompt, for completions)."""
    if request.prompt is not None:
        return Reply(content=request.prompt)
    messages = request.messages
    last = messages[-1].get("content") if messages else ""
    if isinstance(last, list):  # content parts
        last = "".join(str(p.get("text", "")) for p in last if isinstance(p, dict))
    return Reply(content=last if isinstance(last, str) else json.dumps(last))


# ----- the fake tokenizer --------------------------------------------------------------------------


class FakeTokenizer:
    """One token per character, token id = Unicode code point: deterministic and reversible."""

    @staticmethod
    def encode(text: str) -> list[int]:
        return [ord(c) for c in text]

    @staticmethod
    def decode(ids: Iterable[int]) -> str:
        return "".join(chr(i) for i in ids)

    @staticmethod
    def render_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """The text the fake model 'sees': ``<|role|>content`` per message, then ``<|assistant|>``."""
        parts = []
        if tools:
            parts.append("<|tools|>" + json.dumps(tools, sort_keys=True))
        for m in messages:
            content = m.get("content")
            if not isinstance(content, str):
                content = "" if content is None else json.dumps(content, sort_keys=True)
            parts.append(f"<|{m.get('role', 'user')}|>{content}")
            for call in m.get("tool_calls") or []:
                parts.append(
                    "<tool_call>" + json.dumps(call.get("function", call), sort_keys=True) + "</tool_call>"
                )
        parts.append("<|assistant|>")
        return "".join(parts)

    @staticmethod
    def logprob(token_id: int, position: int) -> float:
        """A deterministic negative logprob for a sampled token."""
        return -round(((token_id * 31 + position * 7) % 97 + 1) / 100.0, 4)


def completion_text(content: str | None, calls: list[dict[str, Any]] | None) -> str:
    """The generated text whose tokens the fake model reports: content then each tool call."""
    text = content or ""
    for call in calls or []:
        text += "<tool_call>" + json.dumps(call.get("function", call), sort_keys=True) + "</tool_call>"
    return text


# ----- requests --------------------------------------------------------------------------------------


@dataclass
class ScriptRequest:
    """A request as the script sees it (and as ``ScriptedServer.requests`` records it)."""

    path: str
    method: str
    body: dict[str, Any]
    headers: dict[str, str]
    index: int
    received_at: float
    query: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def prompt(self) -> str | None:
        prompt = self.body.get("prompt")
        return prompt if isinstance(prompt, str) else None

    @property
    def model(self) -> str:
        return str(self.body.get("model", "scripted-model"))

    @property
    def turn(self) -> int:
        """Assistant turns already in the conversation (0 on the first request of a rollout)."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.body.get("tools") or []


# ----- the server -----------------------------------------------------------------------------------

_REPLY_FIELDS = {f.name for f in fields(Reply)}


def to_reply(value: Any) -> Reply:
    """Normalise what a script returned into a :class:`Reply`."""
    if isinstance(value, Reply):
        return value
    if value is None:
        return Reply()
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, int) and not isinstance(value, bool):
        return error(value)
    if isinstance(value, Mapping):
        unknown = set(value) - _REPLY_FIELDS
        if unknown:
            raise ValueError(f"unknown Reply fields in script: {sorted(unknown)}")
        return Reply(**value)
    raise TypeError(f"a script returned {type(value).__name__}; expected Reply, str, dict or int")


class ScriptedServer:
    """A loopback OpenAI-compatible server answering from a script.

    ``with ScriptedServer(script) as srv:`` (or ``async with``) starts it on a free port;
    ``srv.base_url`` ends in ``/v1``. ``token_ids`` / ``logprobs``: ``None`` follows each request
    (vLLM's ``return_token_ids`` / ``logprobs``), ``True``/``False`` force them. ``delay`` is added
    before every reply. ``context_window``: the ``max_model_len`` its ``GET /models`` card advertises
    (as vLLM's does). Recorded: ``requests``, ``request_count``, ``max_in_flight``.
    """

    def __init__(
        self,
        script: Any = None,
        *,
        token_ids: bool | None = None,
        logprobs: bool | None = None,
        delay: float = 0.0,
        exhausted: str = "repeat_last",
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        context_window: int | None = None,
    ) -> None:
        if exhausted not in ("repeat_last", "error"):
            raise ValueError("exhausted must be 'repeat_last' or 'error'")
        self.script = script
        self.token_ids = token_ids
        self.logprobs = logprobs
        self.delay = delay
        self.exhausted = exhausted
        self.model = model
        self.context_window = context_window
        self.host = host
        self.port = port
        self._requested_port = port
        self.requests: list[ScriptRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._counter = itertools.count()
        self._queue_pos = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.tokenizer = FakeTokenizer()

    # ----- lifecycle -----

    @property
    def base_url(self) -> str:
        if not self.port:
            raise RuntimeError("ScriptedServer is not running")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        """The server root (without ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def start(self) -> ScriptedServer:
        if self._thread is not None:
            return self
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="ScriptedServer", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("ScriptedServer did not start within 30 s")
        if self._startup_error is not None:
            self._thread = None
            raise RuntimeError(
                f"ScriptedServer failed to start: {self._startup_error}"
            ) from self._startup_error
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            future.result(timeout=10)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None
        self._loop = None
        self.port = self._requested_port

    def reset(self) -> None:
        """Forget recorded requests and restart a queue script from its first entry."""
        with self._lock:
            self.requests.clear()
            self.max_in_flight = self.in_flight
            self._queue_pos = 0

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _startup(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_get("/health", self._handle_health)
        # stop() should not wait for handlers still sleeping on a scripted delay
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        await site.start()
        self._runner = runner
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ----- handlers -----

    async def _handle_health(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(text="ok")

    async def _handle_models(self, request: Any) -> Any:
        from aiohttp import web

        card: dict[str, Any] = {"id": self.model, "object": "model", "created": 0, "owned_by": "scripted"}
        if self.context_window is not None:
            card["max_model_len"] = self.context_window  # as vLLM advertises it
        data = [card]
        return web.json_response({"object": "list", "data": data})

    def _next_from_queue(self, queue: list[Any]) -> Any:
        with self._lock:
            pos = self._queue_pos
            self._queue_pos += 1
        if pos < len(queue):
            return queue[pos]
        if self.exhausted == "error" or not queue:
            return error(400, f"script exhausted after {len(queue)} replies")
        return queue[-1]

    async def _decide(self, req: ScriptRequest) -> Reply:
        script = self.script
        if isinstance(script, list | tuple):
            script = self._next_from_queue(list(script))
        if script is None:
            return echo(req)
        if callable(script) and not isinstance(script, Reply):
            value = script(req)
            if inspect.isawaitable(value):
                value = await value
            return to_reply(value)
        return to_reply(script)

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return _error_response(400, "request body is not JSON")
            if not isinstance(body, dict):
                return _error_response(400, "request body must be a JSON object")
            req = ScriptRequest(
                path=request.path,
                method=request.method,
                body=body,
                headers={k.lower(): v for k, v in request.headers.items()},
                index=next(self._counter),
                received_at=time.monotonic(),
                query=dict(request.query),
            )
            self.requests.append(req)
            stream = bool(body.get("stream"))
            if stream and (body.get("n", 1) != 1 or not request.path.endswith("/chat/completions")):
                return _error_response(400, "ScriptedServer streams only single-choice chat completions")
            n = body.get("n", 1)
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                return _error_response(400, "n must be a positive integer")
            try:
                rep = await self._decide(req)
                # ``n`` samples: the script is asked once per choice (an error or disconnect in
                # the first decides the whole response, like a server that fails the request).
                extra = [await self._decide(req) for _ in range(n - 1)]
            except Exception as exc:  # a broken script is a test bug: make it loud
                return _error_response(500, f"script raised {type(exc).__name__}: {exc}")
            wait = self.delay + rep.delay
            if wait > 0:
                await asyncio.sleep(wait)
            if rep.disconnect:
                if request.transport is not None:
                    request.transport.abort()
                return web.Response(status=500)  # never reaches the client: the socket is gone
            headers = dict(rep.headers)
            if rep.body is not None:
                if isinstance(rep.body, bytes | str):
                    return web.Response(
                        body=rep.body, status=rep.status, headers=headers, content_type="application/json"
                    )
                return web.json_response(rep.body, status=rep.status, headers=headers)
            if rep.status != 200:
                return _error_response(rep.status, rep.error or f"scripted error {rep.status}", headers)
            payload = self._payload(req, rep, extra)
            if stream:
                return await self._stream(request, req, payload, headers)
            return web.Response(body=_encode(payload), headers=headers, content_type="application/json", charset="utf-8")
        finally:
            with self._lock:
                self.in_flight -= 1

    def _payload(self, req: ScriptRequest, rep: Reply, extra: list[Reply]) -> dict[str, Any]:
        """The response body of a completion request: ``rep``'s choice, then one per ``extra`` reply (``n``)."""
        make = self._chat_body if req.path.endswith("/chat/completions") else self._completion_body
        payload = make(req, rep)
        if extra:
            usage = payload["usage"] = dict(payload["usage"])  # never the script's own dict
        for i, more in enumerate(extra, start=1):
            other = make(req, more)
            payload["choices"].append({**other["choices"][0], "index": i})
            more_tokens = other["usage"].get("completion_tokens", 0)
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + more_tokens
            usage["total_tokens"] = usage.get("total_tokens", 0) + more_tokens
        return payload

    async def _stream(self, request: Any, req: ScriptRequest, payload: dict[str, Any], headers: dict[str, str]) -> Any:
        """``payload`` (a chat completion) as server-sent events, the way OpenAI-compatible
        servers stream it: the message in one delta, then the finish reason, then the usage when
        ``stream_options.include_usage`` asks for it, then ``[DONE]``."""
        from aiohttp import web

        choice = payload["choices"][0]
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        for key in ("reasoning_content",):
            if key in message:
                delta[key] = message[key]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
        base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        first: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None, "logprobs": choice.get("logprobs")}
        if "token_ids" in choice:
            first["token_ids"] = choice["token_ids"]
        chunks = [base | {"choices": [first]}]
        if "prompt_token_ids" in payload:
            chunks[0]["prompt_token_ids"] = payload["prompt_token_ids"]
        chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"], "logprobs": None}]})
        if (req.body.get("stream_options") or {}).get("include_usage"):
            chunks.append(base | {"choices": [], "usage": payload["usage"]})
        response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {_dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _want(self, forced: bool | None, body: dict[str, Any], key: str) -> bool:
        if forced is not None:
            return forced
        return bool(body.get(key))

    @staticmethod
    def _limit(body: dict[str, Any]) -> int | None:
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            if isinstance(value, int) and value >= 0:
                return value
        return None

    def _chat_body(self, req: ScriptRequest, rep: Reply) -> dict[str, Any]:
        index = req.index
        content = rep.content
        finish = rep.finish_reason
        limit = self._limit(req.body)
        calls = None
        if rep.tool_calls:
            calls = []
            for i, call in enumerate(rep.tool_calls):
                call = dict(call)
                if not call.get("id"):
                    call["id"] = f"call_{index}_{i}"
                call.setdefault("type", "function")
                calls.append(call)
        if content is not None and limit is not None and len(content) > limit and not calls:
            content = content[:limit]
            finish = finish or "length"
        finish = finish or ("tool_calls" if calls else "stop")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if rep.reasoning_content is not None:
            message["reasoning_content"] = rep.reasoning_content
        if calls:
            message["tool_calls"] = calls
        prompt_ids = self.tokenizer.encode(self.tokenizer.render_chat(req.messages, req.tools or None))
        completion_ids = self.tokenizer.encode(completion_text(content, calls))
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if self._want(self.logprobs, req.body, "logprobs"):
            choice["logprobs"] = {
                "content": [
                    {
                        "token": chr(t),
                        "logprob": self.tokenizer.logprob(t, i),
                        "bytes": list(chr(t).encode()),
                        "top_logprobs": [],
                    }
                    for i, t in enumerate(completion_ids)
                ]
            }
        body: dict[str, Any] = {
            "id": f"chatcmpl-scripted-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [choice],
            "usage": rep.usage
            or {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
        }
        if self._want(self.token_ids, req.body, "return_token_ids"):
            body["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
        return body

    def _completion_body(self, req: ScriptRequest, rep: Reply) -> dict[str, Any]:
        text = rep.content or ""
        finish = rep.finish_reason
        limit = self._limit(req.body)
        if limit is not None and len(text) > limit:
            text = text[:limit]
            finish = finish or "length"
        prompt_ids = self.tokenizer.encode(req.prompt or "")
        completion_ids = self.tokenizer.encode(text)
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "finish_reason": finish or "stop",
            "logprobs": None,
        }
        if self._want(self.logprobs, req.body, "logprobs"):
            choice["logprobs"] = {
                "tokens": [chr(t) for t in completion_ids],
                "token_logprobs": [self.tokenizer.logprob(t, i) for i, t in enumerate(completion_ids)],
                "top_logprobs": None,
                "text_offset": list(range(len(completion_ids))),
            }
        if self._want(self.token_ids, req.body, "return_token_ids"):
            choice["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
        return {
            "id": f"cmpl-scripted-{req.index}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [choice],
            "usage": rep.usage
            or {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
        }


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


_ENCODER: list[Any] = []


def _encode(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON by msgspec's encoder: the same values as ``_dumps`` (a float
    in exponent form reads ``1e-7`` rather than ``1e-07``) at a fraction of the stdlib's cost, for
    benchmarks that send thousands of requests a second through this server."""
    if not _ENCODER:
        import msgspec

        _ENCODER.append(msgspec.json.Encoder())
    return _ENCODER[0].encode(obj)


def _error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
    from aiohttp import web

    kind = (
        "rate_limit_error"
        if status == 429
        else ("server_error" if status >= 500 else "invalid_request_error")
    )
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=dict(headers or {}))

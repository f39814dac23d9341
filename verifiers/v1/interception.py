"""Interception: every model call of an agent goes through one function, and external programs
reach it through a loopback HTTP proxy speaking OpenAI chat completions.

:func:`model_call` is the one place a call happens: it applies the agent's sampling args, the
task's ``@vf.intercept`` rewrites and ``@vf.stop`` hooks (on the request and on the response),
calls the run's model client (the engine's: its request bound and slots apply), and records the
call on the trace (``Trace.commit_turn``, token ids and logprobs included when the upstream
returned them).

:class:`InterceptionServer` is the proxy: ``POST /v1/chat/completions`` (``stream: true``
answers as server-sent events), one path per rollout (``/r/<key>/v1``) so concurrent agents
share one server. The in-process ``null`` harness calls :func:`model_call` directly: the same
function, so its trace is the one the proxy would record (tests/v1/test_interception.py checks
that), without an HTTP round trip per turn.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from verifiers.utils.json_limits import first_non_finite, json_depth
from verifiers.v1 import policy, prefix
from verifiers.v1.configs.interception import (
    ElasticInterceptionPoolConfig,
    InterceptionConfig,
    InterceptionServerConfig,
    StaticInterceptionPoolConfig,
)
from verifiers.v1.errors import InterceptionError, ProviderError
from verifiers.v1.scoring import first_stop
from verifiers.v1.trace import CHAT_ENDPOINT
from verifiers.v1.types import (
    AssistantMessage,
    Message,
    Request,
    Response,
    Sampling,
    SystemMessage,
    Tool,
    ToolCall,
    ToolMessage,
    TurnTokens,
    Usage,
    UserMessage,
    messages_to_openai,
)

if TYPE_CHECKING:
    from verifiers.v1.task import Task
    from verifiers.v1.trace import Trace

_MESSAGE = TypeAdapter(Message)
MAX_BODY = 64 * 1024 * 1024
MAX_PROGRAM_MESSAGES = 10_000
"""Messages (and tools) one request from an agent program may carry: validating a list costs the
proxy's event loop time in proportion to its length, which a program must not be able to stretch."""
PROGRAM_REFUSED_KEYS = ("extra_body", "extra_headers", "extra_query", "timeout")
"""Keys of a program's request that would steer our own client (its merged body, its headers, its
URL, its deadline) past what the proxy enforces and records: refused. An OpenAI SDK merges its
``extra_body`` into the body itself, so a real client never sends these keys."""
MAX_SAMPLING_DEPTH = 32
BODY_TIMEOUT = 60.0
"""Seconds a program's request body may take to arrive."""


# --- OpenAI <-> v1 shapes ------------------------------------------------------------------------


def messages_from_openai(raw: Any) -> list[Message]:
    """OpenAI chat messages (``tool_calls[].function``) as v1 messages (flat tool calls)."""
    if not isinstance(raw, list):
        raise ValueError("messages must be a list")
    out = []
    for m in raw:
        if not isinstance(m, dict):
            raise ValueError("a message must be an object")
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            m["tool_calls"] = [_call_from_openai(c) for c in m["tool_calls"]]
        if m.get("role") == "developer":
            m["role"] = "system"
        m = {k: v for k, v in m.items() if v is not None or k == "content"}
        if m.get("role") in ("system", "user", "tool") and m.get("content") is None:
            m["content"] = ""
        elif m.get("role") == "assistant" and m.get("content") == "":
            m["content"] = None  # an empty reply, as it was recorded (a program echoes it back as "")
        out.append(_MESSAGE.validate_python(m))  # one at a time: the first bad message ends it
    return out


def _call_from_openai(c: Any) -> dict[str, Any]:
    if not isinstance(c, dict):
        raise ValueError("a tool call must be an object")
    fn = c.get("function") or {}
    args = fn.get("arguments", "")
    return {"id": c.get("id") or "", "type": "function", "name": fn.get("name") or "",
            "arguments": args if isinstance(args, str) else json.dumps(args)}  # fmt: skip


def tools_from_openai(raw: Any) -> list[Tool] | None:
    if not raw:
        return None
    tools = []
    for t in raw:
        fn = (t or {}).get("function") or {}
        tools.append(Tool(name=fn.get("name") or "", description=fn.get("description") or "", parameters=fn.get("parameters") or {}))
    return tools


def tools_to_openai(tools: list[Tool] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters or {"type": "object", "properties": {}}}} for t in tools]


def response_from_model(resp: Any, model: str) -> Response:
    """Our model client's ``ModelResponse`` as a v1 ``Response`` (tokens when the server sent them)."""
    msg = resp.message or {}  # read only
    calls = [ToolCall(**_call_from_openai(c)) for c in msg.get("tool_calls") or ()]
    content = msg.get("content")
    if isinstance(content, list):  # text parts: their text, as the original reads a chat reply
        content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    # an empty reply has no content (None, as the original records it), not an empty string
    message = AssistantMessage(content=content or None, reasoning_content=msg.get("reasoning_content"), tool_calls=calls or None)
    tokens = None
    if resp.prompt_token_ids is not None and resp.completion_token_ids is not None:
        raw_lps = list(resp.completion_logprobs or [])
        # a token without its logprob makes the reply's logprobs missing, never a made-up 0.0 (a
        # probability of 1): training then refuses the reply with MissingTokenDataError
        lps = [] if any(x is None for x in raw_lps) else [float(x) for x in raw_lps]
        tokens = TurnTokens(
            prompt_ids=list(resp.prompt_token_ids), completion_ids=list(resp.completion_token_ids),
            completion_logprobs=lps,
        )  # fmt: skip
    finish = resp.finish_reason if resp.finish_reason in ("stop", "length", "tool_calls") else ("tool_calls" if calls else "stop")
    raw = resp.raw if isinstance(resp.raw, dict) else {}
    return Response(
        id=str(raw.get("id") or f"chatcmpl-{uuid.uuid4().hex}"), created=int(raw.get("created") or time.time()),
        model=str(raw.get("model") or model), message=message, finish_reason=finish,
        usage=Usage.of_response(resp), tokens=tokens, raw=raw,
    )  # fmt: skip


def response_to_openai(resp: Response, *, logprobs: bool = False) -> dict[str, Any]:
    """A v1 ``Response`` as an OpenAI chat completion body (vLLM's token fields kept)."""
    message = messages_to_openai([resp.message])[0]
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": resp.finish_reason, "logprobs": None}
    body: dict[str, Any] = {"id": resp.id, "object": "chat.completion", "created": resp.created, "model": resp.model, "choices": [choice]}
    if resp.usage is not None:
        u = resp.usage
        body["usage"] = {"prompt_tokens": u.input_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}
    if resp.tokens is not None:
        body["prompt_token_ids"] = list(resp.tokens.prompt_ids)
        choice["token_ids"] = list(resp.tokens.completion_ids)
        if logprobs or resp.tokens.completion_logprobs:
            choice["logprobs"] = {"content": [
                {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(resp.tokens.completion_ids, resp.tokens.completion_logprobs, strict=False)
            ]}  # fmt: skip
    return body


# --- the one model-call path ---------------------------------------------------------------------


@dataclass(slots=True)
class CallContext:
    """What one agent's calls need: the run's client and model, the agent's sampling, the task
    whose hooks apply, and the trace the calls are recorded on."""

    client: Any
    model: str
    trace: Trace
    task: Task | None = None
    runtime: Any = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    endpoint: str | None = None
    stops: list[Any] = field(default_factory=list)
    intercepts: list[Any] = field(default_factory=list)
    max_turns: int | None = None
    token_limits: tuple[int | None, int | None, int | None] | None = None
    """The role's ``max_input_tokens``, ``max_output_tokens`` and ``max_total_tokens`` (None: none
    set), checked before each call: the turn that crosses one still completes, the next is refused."""
    secret: str | None = None
    """The bearer token the proxy requires on this route (set by ``register``)."""
    gates_tools: bool = False
    """Whether the harness asks before it runs a tool call (``policy.denied``): an in-process loop.
    For a program that runs its tools itself, a hook that denies a call stops the rollout."""
    policy_state: policy.PolicyState | None = None
    """What the task's request and response hooks remember (made on first use)."""
    prompt: list[Message] | None = None
    """The last call's prompt as committed: after the request hooks (the harness adopts it)."""
    failed_calls: int = 0
    """Calls on ``trace.calls`` that committed no turn (``max_turns`` counts replies)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def for_task(cls, task: Task | None, **kwargs: Any) -> CallContext:
        ctx = cls(task=task, **kwargs)
        if task is not None:
            ctx.stops, ctx.intercepts = task.hooks("stop"), task.hooks("intercept")
        return ctx


class Stopped(Exception):
    """A call that was not made: the trace is already stopped (a stop hook, ``max_turns``)."""

    def __init__(self, condition: str | None) -> None:
        super().__init__(f"the rollout stopped ({condition})")
        self.condition = condition


async def model_call(ctx: CallContext, messages: list[Message], tools: list[Tool] | None, sampling: Mapping[str, Any] | None = None) -> Response:
    """One model call on behalf of ``ctx``'s agent; raises :class:`Stopped` when a stop hook
    or ``max_turns`` ends the rollout before the call, ``ProviderError`` when the model failed.
    A stop hook that fires on the response ends the trace after the call is recorded."""
    trace = ctx.trace
    async with ctx.lock:  # one agent's calls are recorded in order
        if trace.is_completed:
            raise Stopped(trace.stop_condition)
        if ctx.max_turns is not None and len(trace.calls) - ctx.failed_calls >= ctx.max_turns:  # replies, not failed calls
            trace.stop("max_turns")
            raise Stopped("max_turns")
        if ctx.token_limits is not None:
            reached = _token_limit_reached(trace, ctx.token_limits)
            if reached is not None:
                trace.stop(reached)
                raise Stopped(reached)
        # as the original: the limits, then the trace's own @vf.stop hooks (they read what the last
        # turn's tools left on trace.state), then the request's intercepts and stops
        hooked = bool(ctx.stops or ctx.intercepts)
        if ctx.stops and await first_stop(ctx.stops, trace, None, task=ctx.task, runtime=ctx.runtime):
            raise Stopped(trace.stop_condition)
        if hooked or not _typed(messages, tools):
            request = Request(messages=list(messages), tools=tools)
            if hooked:
                request, stopped = await policy.rewrite_request(ctx, request)
                if stopped is not None:
                    # as the original: the request's new messages go on the graph, with no reply
                    trace.commit_prompt(request.messages, tools=request.tools)
                    raise Stopped(stopped)
        else:  # no hook sees the request, and its parts are already the models it would validate into
            request = _Unchecked(list(messages), None if tools is None else list(tools))
        if trace.is_completed:
            raise Stopped(trace.stop_condition)
        args = {**(sampling or {}), **ctx.sampling}  # the agent's sampling wins over the program's
        # where this call's new messages start: prepared user messages among them are spent once it commits
        prepared_from = len(trace._reused_prefix(request.messages)) if hooked and ctx.policy_state is not None and ctx.policy_state.prepared else None
        started = time.time()
        tools_body = tools_to_openai(request.tools)
        forwarded = (
            await prefix.extended_prompt_ids(ctx.client, ctx.model, trace, request.messages, tools_body, args)
            if prefix.wants_tokens(args) else None
        )  # fmt: skip
        send = args if forwarded is None else prefix.with_prompt_ids(args, forwarded)
        try:
            raw = await ctx.client.chat(model=ctx.model, messages=messages_to_openai(request.messages), tools=tools_body, sampling_args=send)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            # the upstream's own status when it answered (our client's ModelError.status), else 502
            status = getattr(exc, "status_code", None) or getattr(exc, "status", None) or 502
            error = ProviderError(f"{type(exc).__name__}: {exc}", status_code=status)
            _failed_call(ctx, args, started, error)  # the call happened: on the record with its error
            raise error from exc
        response = response_from_model(raw, ctx.model)
        if forwarded is not None:
            prefix.check_honoured(ctx.client, trace, forwarded, response.tokens.prompt_ids if response.tokens else None)
        if ctx.intercepts:
            try:
                response = await policy.rewrite_response(ctx, response)
            except Exception as exc:  # a response hook that failed: the call (and its tokens) is still on the record
                _failed_call(ctx, args, started, exc, response)
                raise
        sampling_record = _sampling_record(args)
        node = trace.commit_turn(request.messages, response, tools=request.tools, sampling=sampling_record, endpoint=ctx.endpoint)
        ctx.prompt = request.messages if hooked else None
        span = trace.calls[-1].time  # the call's own fresh span (ModelCall's default), filled in
        span.start, span.end = started, time.time()
        if prepared_from is not None:
            policy.consume_prepared(ctx, request.messages[prepared_from:])
        if hooked:
            if not (ctx.stops and await first_stop(ctx.stops, trace, response, task=ctx.task, runtime=ctx.runtime)):
                # each proposed tool call is judged before the harness may run it
                if response.message.tool_calls and policy.wants_gate(ctx):
                    try:
                        await policy.gate_tool_calls(ctx, node)
                    except Exception as exc:  # the call that proposed them carries the error
                        trace.calls[-1].error = _error_record(exc)
                        if not getattr(exc, "recorded", False):  # and the trace: the rollout ends on it
                            trace.record_error(exc)
                            exc.recorded = True  # type: ignore[attr-defined]
                        raise
        # a turn at max_turns still has its tool calls run (as the original: they may leave files the
        # rewards read); the next call is refused as max_turns
        return response


def _sampling_record(args: Mapping[str, Any]) -> Sampling | None:
    return Sampling.model_validate({k: v for k, v in args.items() if k not in ("extra_headers",)}) if args else None


def _error_record(exc: BaseException) -> Any:
    from verifiers.v1.trace import Error

    return Error(type=type(exc).__name__, message=str(exc), status_code=getattr(exc, "status_code", None))


def _failed_call(ctx: CallContext, args: Mapping[str, Any], started: float, exc: BaseException, response: Response | None = None) -> None:
    """A call that committed no turn, on ``trace.calls`` with its error (as the original records one)."""
    from verifiers.v1.trace import ModelCall, TimeSpan

    try:
        sampling = _sampling_record(args)
    except ValidationError:
        sampling = None
    ctx.trace.calls.append(ModelCall(
        model=ctx.model, sampling=sampling, endpoint=ctx.endpoint, time=TimeSpan(start=started, end=time.time()),
        finish_reason=response.finish_reason if response is not None else None,
        usage=response.usage if response is not None else None, error=_error_record(exc),
    ))  # fmt: skip
    ctx.failed_calls += 1


def _token_limit_reached(trace: Trace, limits: tuple[int | None, int | None, int | None]) -> str | None:
    max_input, max_output, max_total = limits
    if max_input is not None and trace.num_input_tokens >= max_input:
        return "max_input_tokens"
    if max_output is not None and trace.num_output_tokens >= max_output:
        return "max_output_tokens"
    if max_total is not None and trace.num_total_tokens >= max_total:
        return "max_total_tokens"
    return None


_MESSAGE_TYPES = frozenset({SystemMessage, UserMessage, AssistantMessage, ToolMessage})


def _typed(messages: list[Message], tools: list[Tool] | None) -> bool:
    """Whether ``Request(messages=messages, tools=tools)`` would keep every item as it is: each
    message of one of the message classes and each tool a ``Tool`` (pydantic keeps such
    instances unvalidated), so building the request checks nothing."""
    return all(type(m) in _MESSAGE_TYPES for m in messages) and (tools is None or all(type(t) is Tool for t in tools))


@dataclass(slots=True)
class _Unchecked:
    """A request's messages and tools where no hook looks at a ``Request`` (nothing to validate)."""

    messages: list[Message]
    tools: list[Tool] | None


# --- the loopback HTTP proxy ---------------------------------------------------------------------


class InterceptionServer:
    """A loopback OpenAI-compatible server; each registered agent gets its own base URL."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._routes: dict[str, CallContext] = {}
        self._runner: Any = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> InterceptionServer:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/r/{key}/v1/chat/completions", self._chat)
        app.router.add_get("/r/{key}/v1/models", self._models)
        # a program that hangs up mid-call cancels it: its retry is not recorded as a second turn
        # a kept-alive connection whose next request is not whole within KEEPALIVE_TIMEOUT of the
        # last reply is closed (aiohttp's default is an hour): a trickled second head holds nothing
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, keepalive_timeout=KEEPALIVE_TIMEOUT)
        await self._runner.setup()
        handlers = self._runner.server
        guard = _ConnectionGuard()
        self._server = await asyncio.get_running_loop().create_server(lambda: _Guarded(handlers(), guard), self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> InterceptionServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def register(self, ctx: CallContext) -> str:
        """Route a fresh path to ``ctx``; returns its base URL (ends in ``/v1``). Calls must carry
        ``Authorization: Bearer <ctx.secret>`` (a fresh secret unless ``ctx`` has one): the URL
        shows in the program's command line, the secret goes in its environment."""
        key = secrets.token_urlsafe(12)
        ctx.secret = ctx.secret or secrets.token_urlsafe(24)
        self._routes[key] = ctx
        ctx.endpoint = ctx.endpoint or CHAT_ENDPOINT
        return f"http://{self.host}:{self.port}/r/{key}/v1"

    def _route(self, request: Any) -> CallContext | None:
        ctx = self._routes.get(request.match_info["key"])
        if ctx is None:
            return None
        given = request.headers.get("Authorization", "")
        # a header's bytes that are not UTF-8 come as surrogates: such a header is a wrong secret
        if ctx.secret and not secrets.compare_digest(given.encode("utf-8", "surrogateescape"), f"Bearer {ctx.secret}".encode()):
            return None  # a wrong secret looks like a wrong route: nothing to probe
        return ctx

    def unregister(self, base_url: str) -> None:
        key = base_url.rstrip("/").split("/r/", 1)[-1].split("/", 1)[0]
        self._routes.pop(key, None)

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        ctx = self._route(request)
        if ctx is None:
            return _error(404, "unknown interception route")
        return web.json_response({"object": "list", "data": [{"id": ctx.model, "object": "model"}]})

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        ctx = self._route(request)
        if ctx is None:
            return _error(404, "unknown interception route or secret (or the rollout has ended)")
        try:
            async with asyncio.timeout(BODY_TIMEOUT):  # a body that never finishes holds no handler
                body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            refused = [k for k in PROGRAM_REFUSED_KEYS if k in body]
            if refused:
                raise ValueError(f"{', '.join(refused)} cannot be set by an agent program (send sampling keys at the top level)")
            raw_messages, raw_tools = body.get("messages"), body.get("tools")
            if not raw_messages:
                raise ValueError("messages must be a non-empty list")
            for what, items in (("messages", raw_messages), ("tools", raw_tools)):
                if isinstance(items, list) and len(items) > MAX_PROGRAM_MESSAGES:
                    raise ValueError(f"{len(items)} {what} in one request; at most {MAX_PROGRAM_MESSAGES}")
            messages = messages_from_openai(raw_messages)
            tools = tools_from_openai(raw_tools)
            # prompt ids are the interception layer's to forward (verifiers.v1.prefix), never a program's
            sampling = {k: v for k, v in body.items() if k not in ("messages", "tools", "model", "stream", "stream_options", "tool_choice", "kv_transfer_params")}
            if sampling.get("n", 1) not in (1, None):
                raise ValueError("n must be 1: a rollout records one reply per call")
            _check_depth(sampling, MAX_SAMPLING_DEPTH)
            Sampling.model_validate(sampling)  # before the call: a bad knob spends no tokens
        except TimeoutError:
            return _error(408, f"the request body did not arrive within {BODY_TIMEOUT:g} s")
        except (ValueError, ValidationError, RecursionError, TypeError, AttributeError) as exc:
            # anything a program can send that is not a chat request: one 400, nothing recorded
            return _error(400, f"bad request: {type(exc).__name__}: {str(exc)[:500]}")
        stream = bool(body.get("stream"))
        try:
            response = await model_call(ctx, messages, tools, sampling)
        except Stopped as exc:
            # the agent program sees a clean end of conversation, not a server failure
            return _error(400, f"the rollout has stopped ({exc.condition}); no further model calls", code="rollout_stopped")
        except policy.RequestRefused as exc:
            return _error(400, f"bad request: {exc}")
        except ProviderError as exc:
            # the provider's status, relayed (as the original does): a program's SDK retries a 429 or
            # a 5xx itself and gives up on a 4xx
            status = exc.status_code if isinstance(exc.status_code, int) and 400 <= exc.status_code <= 599 else 502
            return _error(status, str(exc))
        except Exception as exc:  # a failing intercept hook: recorded on the trace already
            return _error(500, f"{type(exc).__name__}: {exc}")
        if ctx.trace.is_completed:
            # a stop fired on the reply, or a hook denied one of its tool calls: the reply is on the
            # trace, and the program (which would run those calls itself) does not receive it
            return _error(400, f"the rollout has stopped ({ctx.trace.stop_condition}); no further model calls", code="rollout_stopped")
        out = response_to_openai(response, logprobs=bool(body.get("logprobs")))
        if not stream:
            return web.json_response(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for chunk in _chunks(out):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


MAX_CONNECTIONS = 1024
"""Connections the proxy holds open at once (a program that opens more is cut off at once)."""
HEAD_TIMEOUT = 30.0
"""Seconds a new connection has to send its first request's head."""
KEEPALIVE_TIMEOUT = 75.0
"""Seconds a kept-alive connection has, after a reply, to send its next whole request (idle or
trickling); then it is closed and a program's client opens a new one."""


class _ConnectionGuard:
    def __init__(self) -> None:
        self.open = 0


class _Guarded(asyncio.Protocol):
    """One proxy connection, handed to aiohttp's handler unless the proxy already holds
    ``MAX_CONNECTIONS``, and closed when its first request head has not arrived within
    ``HEAD_TIMEOUT`` (a program that trickles half a head holds no connection for long)."""

    def __init__(self, inner: Any, guard: _ConnectionGuard) -> None:
        self.inner, self.guard = inner, guard
        self.counted = False
        self.head_done = False
        self.tail = b""
        self.timer: asyncio.TimerHandle | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.guard.open >= MAX_CONNECTIONS:
            transport.abort()
            return
        self.guard.open += 1
        self.counted = True
        self.timer = asyncio.get_running_loop().call_later(HEAD_TIMEOUT, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        if not self.head_done and self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.head_done:
            seen = self.tail + data
            if b"\r\n\r\n" in seen:
                self.head_done = True
                if self.timer is not None:
                    self.timer.cancel()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> Any:
        return self.inner.eof_received() if self.counted else None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.counted = False
            self.guard.open -= 1
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def _check_depth(value: Any, limit: int) -> None:
    """Refuse a value nested deeper than ``limit`` (a record must stay writable) or holding a
    number JSON cannot (NaN, Infinity: a provider's parser refuses them, a record cannot hold them)."""
    if json_depth(value, limit) > limit:
        raise ValueError(f"a sampling value is nested more than {limit} deep")
    bad = first_non_finite(value)
    if bad is not None:
        raise ValueError(f"a sampling value is {bad}, not a finite number")


def _chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A completion as the SSE chunks a streaming client reassembles: role, content, tool calls,
    then the finish reason with usage and vLLM's token fields."""
    choice = body["choices"][0]
    msg = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None, **extra}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if msg.get("reasoning_content"):
        out.append(chunk({"reasoning_content": msg["reasoning_content"]}))
    if msg.get("content"):
        out.append(chunk({"content": msg["content"]}, logprobs=choice.get("logprobs")))
    for i, call in enumerate(msg.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, **call}]}))
    last = chunk({}, finish_reason=choice["finish_reason"])
    if "token_ids" in choice:
        last["choices"][0]["token_ids"] = choice["token_ids"]
    if "prompt_token_ids" in body:
        last["prompt_token_ids"] = body["prompt_token_ids"]
    if "usage" in body:
        last["usage"] = body["usage"]
    out.append(last)
    return out


def _error(status: int, message: str, *, code: str | None = None) -> Any:
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": "interception_error", "code": code}}, status=status)


__all__ = [
    "CallContext",
    "ElasticInterceptionPoolConfig",
    "InterceptionConfig",
    "InterceptionError",
    "InterceptionServer",
    "InterceptionServerConfig",
    "StaticInterceptionPoolConfig",
    "Stopped",
    "model_call",
]

"""The task's policy around each model call: its ``@vf.intercept`` rewrites and ``@vf.stop`` checks on
the request and the response, and the verdict on each tool call the model proposes.

The rules are the original's, so an environment gets exactly what it asked for:

- A request hook may rewrite only the messages the graph does not hold yet (the request's tail),
  and of those only user and tool messages: it may not add or remove messages, change a message's
  type, a tool message's call id or name, or the tools. A rewrite that breaks a rule is the task's
  error (recorded on the trace); the call is not made.
- Request hooks see each new tool result in turn: the request is cut after each one, so a hook
  that looks at the last message judges every parallel call's result.
- A response hook may only replace the assistant message, with an inert text-only one (no tool
  calls, no reasoning, no provider state); the rewritten reply finishes as ``stop``.
- Before any proposed tool call runs, the request hooks run over the conversation with an empty
  result for that call: a stop ends the rollout, and a rewrite is the call's verdict: the call
  does not run and the model reads the rewritten result instead. A harness that cannot be told
  (a program that runs its tools itself) has its rollout stopped instead, named after the hook.
- A rewritten tool result is pinned for the rest of the rollout: a harness that re-sends its own
  copy has it replaced, so the model and the graph see the rewrite on every later call.

The hot path is untouched: a task with no request or response hook never reaches this module.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import TYPE_CHECKING, Any

from verifiers.v1.errors import HarnessError
from verifiers.v1.messages import capped_tool_output
from verifiers.v1.scoring import HookError, first_stop, hook_boundary, record_hook_error, run_intercept
from verifiers.v1.types import AssistantMessage, InterceptRecord, Request, Response, ToolMessage, UserMessage

if TYPE_CHECKING:
    from verifiers.v1.interception import CallContext

MAX_POLICED_MESSAGES = 100_000
"""Messages one call's request hooks may be handed in all (each view is a fresh copy; a request is
cut after each new tool result, and each proposed tool call of a reply is judged on the whole
conversation): past it a program's request is refused, and a reply's tool calls are not run,
before any copy is made, so a request of 10,000 tool results cannot hold the loop for minutes. A
real call is far below it (a 500-message conversation, 20 tool calls, two hooks: about 20,000)."""


class RequestRefused(ValueError):
    """A request the task's hooks cannot police (the proxy answers 400; nothing is recorded)."""


ToolKey = tuple[str, str]
"""A tool call occurrence: the digest of the conversation up to the assistant message that made
it, and the call's id."""


class PolicyState:
    """What one agent's policy remembers between its calls."""

    __slots__ = ("denied", "pinned", "prepared", "verdicts")

    def __init__(self) -> None:
        self.pinned: dict[ToolKey, ToolMessage] = {}
        """The results the model must see for calls: rewrites, and verdicts of denied calls."""
        self.verdicts: dict[ToolKey, ToolMessage | None] = {}
        """Each proposed call's verdict: None to run it, else the result that replaces it."""
        self.denied: dict[str, ToolMessage] = {}
        """The last reply's denied calls by call id (what an in-process harness asks)."""
        self.prepared: Counter[str] = Counter()
        """User messages rewritten before a program received them: not rewritten again."""


def state_of(ctx: CallContext) -> PolicyState:
    state = ctx.policy_state
    if state is None:
        state = ctx.policy_state = PolicyState()
    return state


def _digest(message: Any) -> str:
    """A message's identity for the policy's bookkeeping: a short hash of its JSON."""
    return hashlib.blake2b(message.model_dump_json().encode(), digest_size=16).hexdigest()


Digests = dict[int, tuple[Any, str]]
"""Message digests by object id, for one gate or rewrite (each entry holds its message, so no other
object takes its id while it is kept)."""


def _digest_of(message: Any, cache: Digests | None) -> str:
    if cache is None:
        return _digest(message)
    hit = cache.get(id(message))
    if hit is not None and hit[0] is message:
        return hit[1]
    digest = cache[id(message)] = (message, _digest(message))
    return digest[1]


def tool_result_keys(state: PolicyState, messages: list[Any], cache: Digests | None = None) -> dict[int, ToolKey]:
    """The call occurrence of each tool message in ``messages`` that answers a call made earlier in
    them (by position). A pinned result counts as the message the model saw."""
    prefix = hashlib.blake2b(digest_size=16)
    calls: dict[str, ToolKey] = {}
    keys: dict[int, ToolKey] = {}
    for position, message in enumerate(messages):
        if isinstance(message, ToolMessage) and message.tool_call_id in calls:
            keys[position] = key = calls[message.tool_call_id]
            message = state.pinned.get(key, message)
        prefix.update(_digest_of(message, cache).encode())
        if isinstance(message, AssistantMessage) and message.tool_calls:
            digest = prefix.hexdigest()
            calls.update((call.id, (digest, call.id)) for call in message.tool_calls)
    return keys


def _pin(state: PolicyState, messages: list[Any], cache: Digests | None = None) -> list[Any]:
    if not state.pinned:
        return messages
    out = messages
    for position, key in tool_result_keys(state, messages, cache).items():
        pinned = state.pinned.get(key)
        if pinned is not None and out[position] != pinned:
            out = list(out) if out is messages else out
            out[position] = pinned
    return out


def _refuse(fn: Any, message: str) -> Exception:
    from verifiers.v1.scoring import InvalidScore

    return InvalidScore("intercept", getattr(fn, "__name__", str(fn)), message)


def _checked_request(fn: Any, current: Request, result: Request, active: set[int]) -> Request:
    """``result`` if it keeps the rules (module docstring), its rewritten tool results capped."""
    if len(result.messages) != len(current.messages):
        raise _refuse(fn, "request interceptors cannot add or remove messages")
    if result.tools != current.tools:
        raise _refuse(fn, "request interceptors cannot rewrite tools")
    messages = list(result.messages)
    for position, (before, after) in enumerate(zip(current.messages, messages, strict=True)):
        if before == after:
            continue
        if position not in active:
            raise _refuse(fn, "request interceptors can only rewrite new user or tool messages")
        if type(after) is not type(before):
            raise _refuse(fn, f"expected {type(before).__name__}, got {type(after).__name__}")
        # a model_copy(update=...) is not validated: the rewrite is, before anything reads it
        messages[position] = after = type(before).model_validate(after.model_dump(warnings=False))
        if isinstance(after, ToolMessage):
            if after.tool_call_id != before.tool_call_id or after.name != before.name:
                raise _refuse(fn, "request interceptors cannot change a tool-call ID or name")
            capped = capped_tool_output(after.content)
            if capped is not after.content:
                messages[position] = after.model_copy(update={"content": capped})
    return result if messages == result.messages else result.model_copy(update={"messages": messages})


def _broken(fn: Any, exc: Exception) -> HookError:
    """A hook's result that failed its checks in an unforeseen way (a field of the wrong type that
    ``model_copy(update=...)`` let through): the hook's error like any other."""
    if isinstance(exc, HookError):
        return exc
    return _refuse(fn, f"returned a value that does not validate: {type(exc).__name__}: {str(exc)[:500]}")  # type: ignore[return-value]


async def rewrite_request(
    ctx: CallContext, request: Request, *, run_stops: bool = True, _digests: Digests | None = None,
) -> tuple[Request, str | None]:  # fmt: skip
    """``request`` after the task's request hooks, and the name of the request stop that fired (the
    trace is stopped then), or None."""
    state, trace = state_of(ctx), ctx.trace
    cache = _digests if _digests is not None else {}
    messages = _pin(state, list(request.messages), cache)
    intercepts = [fn for fn in ctx.intercepts if hook_boundary(fn) is Request]
    stops = [fn for fn in ctx.stops if hook_boundary(fn) is Request] if run_stops else []
    if not intercepts and not stops:
        return (request if messages == request.messages else request.model_copy(update={"messages": messages})), None
    keys = tool_result_keys(state, messages, cache)
    tail = len(trace._reused_prefix(messages))

    def fresh_tool(position: int) -> bool:
        return isinstance(messages[position], ToolMessage) and keys.get(position) not in state.pinned

    candidates: set[int] = set()
    if intercepts:
        prepared = state.prepared.copy()
        for position in range(tail, len(messages)):
            message = messages[position]
            if isinstance(message, UserMessage):
                digest = _digest_of(message, cache)
                if prepared[digest]:
                    prepared[digest] -= 1
                    continue
                candidates.add(position)
            elif fresh_tool(position):
                candidates.add(position)
    # each new tool result ends a view of its own, so a hook judging the last message sees them all
    ends = [position + 1 for position in range(tail, len(messages)) if fresh_tool(position)]
    if not ends or ends[-1] != len(messages):
        ends.append(len(messages))
    views = sum(ends) * ((len(intercepts) if candidates else 0) + len(stops))
    if views > MAX_POLICED_MESSAGES:
        raise RequestRefused(
            f"the request's {len(ends)} new tool results would hand the task's request hooks {views:,} messages "
            f"(at most {MAX_POLICED_MESSAGES:,}); send fewer new tool results per call"
        )
    original = list(messages)
    start = 0
    for end in ends:
        active = {p for p in candidates if start <= p < end}
        current = Request(messages=messages[:end], tools=request.tools)
        for fn in intercepts if active else ():
            try:
                result = await run_intercept(fn, trace, current.model_copy(deep=True), task=ctx.task, runtime=ctx.runtime)
                if result is None:
                    continue
                result = _checked_request(fn, current, result, active)
            except Exception as exc:
                raise record_hook_error(trace, _broken(fn, exc), "request interception") from exc
            if result != current:
                current = result
                trace.request_rewrites.append(InterceptRecord(handler=fn.__name__))
        messages[:end] = current.messages
        if stops and await first_stop(stops, trace, current.model_copy(deep=True), task=ctx.task, runtime=ctx.runtime):
            return request.model_copy(update={"messages": messages}), trace.stop_condition
        start = end
    keys = tool_result_keys(state, messages, cache)
    for position in candidates:
        after = messages[position]
        if isinstance(after, ToolMessage) and position in keys and after != original[position]:
            state.pinned[keys[position]] = after
    return request.model_copy(update={"messages": messages}), None


async def prepare_users(ctx: CallContext, messages: list[Any]) -> list[Any]:
    """``messages`` (a conversation about to be handed to a program) with its new user messages
    rewritten by the request hooks, remembered so the program's request is not rewritten twice."""
    if not any(hook_boundary(fn) is Request for fn in ctx.intercepts):
        return messages
    rewritten, _ = await rewrite_request(ctx, Request(messages=list(messages)), run_stops=False)
    tail = len(ctx.trace._reused_prefix(rewritten.messages))
    state_of(ctx).prepared.update(_digest(m) for m in rewritten.messages[tail:] if isinstance(m, UserMessage))
    return list(rewritten.messages)


def consume_prepared(ctx: CallContext, messages: list[Any]) -> None:
    """Forget the prepared user messages a committed call carried."""
    state = ctx.policy_state
    if state is not None and state.prepared:
        prepared = state.prepared
        for message in messages:
            if isinstance(message, UserMessage):
                digest = _digest(message)
                if prepared[digest]:
                    prepared[digest] -= 1
                    if not prepared[digest]:
                        del prepared[digest]


async def rewrite_response(ctx: CallContext, response: Response) -> Response:
    """``response`` after the task's response intercepts (before the call is recorded)."""
    trace = ctx.trace
    for fn in ctx.intercepts:
        if hook_boundary(fn) is not Response:
            continue
        try:
            result = await run_intercept(fn, trace, response.model_copy(deep=True), task=ctx.task, runtime=ctx.runtime)
            if result is None or _same_response(result, response):
                continue
            kept = result.model_copy(update={"message": response.message, "finish_reason": response.finish_reason})
            if not _same_response(kept, response):
                raise _refuse(fn, "response interceptors can only replace the assistant message")
            message = result.message
            if type(message) is not AssistantMessage:
                raise _refuse(fn, f"the reply must be an AssistantMessage, not {type(message).__name__}")
            message = AssistantMessage.model_validate(message.model_dump(warnings=False))  # model_copy does not validate
            if message.reasoning_content or message.tool_calls or message.provider_state:
                raise _refuse(fn, "response interceptors must return an inert text-only message")
            result = result.model_copy(update={"message": message})
        except Exception as exc:
            raise record_hook_error(trace, _broken(fn, exc), "response interception") from exc
        response = result.model_copy(update={"finish_reason": "stop"})
        trace.response_rewrites.append(InterceptRecord(handler=fn.__name__))
    return response


def _same_response(a: Response, b: Response) -> bool:
    # the provider's raw body is not part of the reply a hook judges
    return all(v == getattr(b, k) for k, v in a.__dict__.items() if k != "raw")


def wants_gate(ctx: CallContext) -> bool:
    return any(hook_boundary(fn) is Request for fn in (*ctx.intercepts, *ctx.stops))


async def gate_tool_calls(ctx: CallContext, node: int) -> str | None:
    """Judge each tool call of the reply at ``node`` before any runs (module docstring). Fills
    ``PolicyState.denied``; returns the name that stopped the rollout, or None."""
    from verifiers.v1 import graph

    state, trace = state_of(ctx), ctx.trace
    state.denied = {}
    assistant = trace.nodes[node].message
    if not isinstance(assistant, AssistantMessage) or not assistant.tool_calls:
        return None
    branch = [trace.nodes[i].message for i in graph.path_to(trace.nodes, node)]
    hooks = sum(1 for fn in (*ctx.intercepts, *ctx.stops) if hook_boundary(fn) is Request)
    views = len(assistant.tool_calls) * (len(branch) + 1) * hooks
    if views > MAX_POLICED_MESSAGES:
        raise HarnessError(
            f"the reply's {len(assistant.tool_calls)} tool calls on a {len(branch)}-message conversation would hand the "
            f"task's request hooks {views:,} messages (at most {MAX_POLICED_MESSAGES:,}); none of them was run"
        )
    tools = trace.tools or None
    cache: Digests = {}  # the branch is digested once for all of the reply's calls
    judged: set[ToolKey] = set()
    for call in assistant.tool_calls:
        probe = ToolMessage(tool_call_id=call.id, content="", name=call.name)
        messages = [*branch, probe]
        key = tool_result_keys(state, messages, cache)[len(branch)]
        if key in judged:
            raise HarnessError(f"tool call id {call.id!r} was reused in the same assistant turn")
        judged.add(key)
        if key in state.verdicts:
            # the same reply to the same conversation again (a program that sent its request twice):
            # the same verdict, not judged a second time
            verdict = state.verdicts[key]
            if verdict is not None:
                if not ctx.gates_tools:
                    trace.stop("intercept")
                    return "intercept"
                state.denied[call.id] = verdict
            continue
        rewrites = len(trace.request_rewrites)
        request, stopped = await rewrite_request(ctx, Request(messages=messages, tools=tools), _digests=cache)
        if stopped is not None:
            return stopped
        verdict = request.messages[-1]
        if verdict == probe:
            state.verdicts[key] = None
            continue
        state.verdicts[key] = verdict
        if not ctx.gates_tools:
            # the program would run the call anyway: only ending the rollout keeps the transcript true
            name = trace.request_rewrites[-1].handler if len(trace.request_rewrites) > rewrites else "intercept"
            trace.stop(name)
            return name
        state.denied[call.id] = verdict
    return None

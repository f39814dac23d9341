"""One rollout's turn loop: the model's turn, the environment's reply, until a stop condition.

:func:`play_turns` fills a fresh state with a :class:`~verifiers.engine.plans.TurnLoop`'s hooks.
Errors of the environment's code are recorded on the state with their source (``setup``,
``model``, ``env_response``, ``cleanup``) and end the rollout through the ``has_error`` stop
condition; only a real cancellation propagates. A context-window overflow reported by the server
is not an error: it stops the rollout as ``prompt_too_long`` (truncated); only the server's own
signals count (:func:`verifiers.errors.is_context_overflow`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verifiers.errors import InvalidModelResponseError, error_record, is_context_overflow, is_user_raised
from verifiers.types import AssistantMessage, State, TextMessage, UserMessage, to_message

if TYPE_CHECKING:
    from verifiers.engine.client import ModelClientProtocol
    from verifiers.engine.plans import TurnLoop

__all__ = ["add_warning", "messages_of", "play_turns"]

def add_warning(state: State, type_: str, message: str, source: str) -> None:
    """Flag something on a rollout that is not an error (it neither stops nor zeroes the rollout):
    an empty reply, a tool result that could not be shown ... Saved as the record's ``warnings``."""
    warnings = state.get("warnings")
    if not isinstance(warnings, list):
        warnings = state["warnings"] = []
    warnings.append({"type": type_, "message": message, "source": source})


def messages_of(state: State) -> Any:
    """The conversation so far: prompt + completion (a list of messages, or text)."""
    prompt, completion = state["prompt"], state["completion"]
    if isinstance(prompt, str):
        return prompt + (completion or "")
    return prompt + completion


async def play_turns(loop: TurnLoop, state: State, client: ModelClientProtocol, model: str, sampling_args: Any) -> None:
    """Run the turns of one rollout into ``state`` (its ``is_completed`` is True afterwards)."""
    chat = not isinstance(state["prompt"], str)
    try:
        result = loop.setup(state)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Mapping) and result is not state:
            state.update(result)
    except BaseException as exc:
        if not is_user_raised(exc):  # the rollout's timeout (or the run) cancelled the setup
            state["is_completed"] = True
            await loop.cleanup(state)
            raise
        state["error"] = error_record(exc, "setup")
        state["stop_condition"] = "has_error"
        state["is_completed"] = True
        await loop.cleanup(state)
        return
    request = loop.request
    tools = loop.tools if chat else None
    should_stop = loop.should_stop
    recheck_after_reply = loop.stop_after_reply
    check = True
    try:
        while True:
            if check and await should_stop(state):
                break
            check = True
            context = messages_of(state)
            try:
                if request is not None:
                    response = await request(client, model, context, tools, sampling_args, "chat" if chat else "completion")
                elif chat:
                    response = await client.chat(model=model, messages=context, tools=tools, sampling_args=sampling_args)
                else:
                    response = await client.completion(model=model, prompt=context, sampling_args=sampling_args)
            except BaseException as exc:
                if not is_user_raised(exc):
                    raise
                if is_context_overflow(exc):  # [faultsrun] the servers' own signals only (errors.py)
                    state["prompt_too_long"] = True
                    state["is_truncated"] = True
                    continue
                state["error"] = error_record(exc, "model")
                continue
            _record_response(state, context, response, chat, loop.max_seq_len)
            if await should_stop(state):
                break
            try:
                reply = loop.respond(messages_of(state), state)
                if inspect.isawaitable(reply):
                    reply = await reply
                # a reply of the wrong type is the environment's error, not the engine's
                before = len(state["completion"]) if chat else None
                _append_env_reply(state, reply, chat)
            except BaseException as exc:
                if not is_user_raised(exc):
                    raise
                state["error"] = error_record(exc, "env_response")
                continue
            if recheck_after_reply:
                continue
            # the 0.3.x loop goes from the reply straight to the next model call, unless the reply
            # failed (a tool's stop error is recorded, not raised) or ended the rollout: then its
            # completion ends with ``final_env_response`` in place of the reply no model saw
            final = state.get("final_env_response")
            if final is None:
                check = state.get("error") is not None
            elif before is not None:
                _end_with_final_reply(state, before, final)
    finally:
        state["is_completed"] = True
        await loop.cleanup(state)


def _check_response(response: Any, chat: bool) -> tuple[str, str] | None:
    """What is wrong with a model reply, if anything: ``("tool_calls" | "logprobs" | "empty", why)``."""
    message = getattr(response, "message", None)
    message = message if isinstance(message, dict) else {}
    calls = message.get("tool_calls")
    if calls is not None and calls != []:
        if not isinstance(calls, list):
            return "tool_calls", f"the reply's tool_calls is a {type(calls).__name__}, expected a list"
        for i, call in enumerate(calls):
            if not isinstance(call, dict) or not (isinstance(call.get("function"), dict) or "name" in call):
                return "tool_calls", f"tool call {i} of the reply is not an object with a 'function' object"
    logprobs = getattr(response, "completion_logprobs", None)
    if logprobs is not None and None in logprobs:
        return "logprobs", f"the server returned logprob null for completion token {logprobs.index(None)}"
    content = getattr(response, "text", None) if not chat else message.get("content")
    if (content is None or content == "") and not calls:
        return "empty", "the model's reply has no content and no tool calls"
    return None


def _record_response(state: State, context: Any, response: Any, chat: bool, max_seq_len: int | None) -> None:
    problem = _check_response(response, chat)
    if problem is not None and problem[0] == "tool_calls":
        # keep the reply (without the unusable tool calls) so the record shows what came back
        response.message = {k: v for k, v in response.message.items() if k != "tool_calls"}
    if chat:
        message = AssistantMessage(response.message)
        state["completion"].append(message)
        completion_part: Any = [message]
    else:
        text = response.text if response.text is not None else (response.message.get("content") or "")
        state["completion"] = (state["completion"] or "") + text
        completion_part = text
    state["responses"].append(response)
    usage = response.usage
    totals = state["usage"]
    prompt_tokens = usage.get("prompt_tokens", 0) or 0
    completion_tokens = usage.get("completion_tokens", 0) or 0
    totals["prompt_tokens"] += prompt_tokens
    totals["completion_tokens"] += completion_tokens
    tokens = None
    # token data when the server returned any: ids (vLLM return_token_ids) and/or sampled logprobs
    # (-S '{"logprobs": true}' against any server)
    if response.completion_token_ids is not None or response.completion_logprobs is not None:
        tokens = {
            "prompt_ids": response.prompt_token_ids,
            "completion_ids": response.completion_token_ids,
            "completion_logprobs": response.completion_logprobs,
        }
    state["trajectory"].append(
        {
            "prompt": context,
            "completion": completion_part,
            "response": response.to_dict(include_raw=False),
            "tokens": tokens,
            "reward": None,
            "advantage": None,
            "extras": {},
        }
    )
    state["turn"] += 1
    if response.finish_reason == "length":
        state["is_truncated"] = True
    if max_seq_len and prompt_tokens + completion_tokens >= max_seq_len:
        state["prompt_too_long"] = True
        state["is_truncated"] = True
    if problem is not None:
        kind, message = problem
        if kind == "empty":  # not an error (the reward decides), but never silent
            add_warning(state, "EmptyReply", message, "model")
        elif not state.get("error"):
            state["error"] = error_record(InvalidModelResponseError(message), "model")


def _append_env_reply(state: State, reply: Any, chat: bool) -> None:
    if reply is None:
        return
    if not chat:
        state["completion"] = (state["completion"] or "") + (reply if isinstance(reply, str) else str(reply))
        return
    if isinstance(reply, str):
        state["completion"].append(UserMessage(reply))
    elif _is_message(reply):
        state["completion"].append(to_message(reply))
    elif isinstance(reply, list | tuple) and all(_is_message(m) for m in reply):
        state["completion"].extend([to_message(m) for m in reply])  # all or nothing
    else:
        raise TypeError(
            f"env_response returned {_describe(reply)}; expected a message, a list of messages, a string or None"
        )


def _end_with_final_reply(state: State, before: int, final: Any) -> None:
    """A chat completion's last reply replaced by ``final_env_response``: a string is one text
    message (``{"role": "text"}``, as the 0.3.x library normalizes one), else message(s)."""
    kept = state["completion"][before:]
    del state["completion"][before:]
    try:
        _append_env_reply(state, TextMessage(content=final) if isinstance(final, str) else final, True)
    except TypeError as exc:
        state["completion"].extend(kept)
        state["error"] = error_record(exc, "env_response")


def _is_message(obj: Any) -> bool:
    return isinstance(obj, Mapping) or hasattr(obj, "role")  # a dict, or an openai message object


def _describe(reply: Any) -> str:
    if isinstance(reply, list | tuple):
        bad = next((m for m in reply if not _is_message(m)), None)
        return f"a {type(reply).__name__} holding a {type(bad).__name__}"
    return f"a {type(reply).__name__}"

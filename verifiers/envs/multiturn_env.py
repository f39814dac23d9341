"""``MultiTurnEnv``: the turn loop (model turn, then environment response, until a stop condition).

Subclasses implement ``env_response(messages, state)`` (OLD: returns ``(messages, state)``; NEW:
returns messages) and end rollouts either by overriding ``is_completed(messages, state)`` (OLD) or
by decorating methods with ``@vf.stop`` (NEW). Built-in stop conditions, checked first: an error,
a prompt that no longer fits (``prompt_too_long``), ``max_turns``, ``max_total_completion_tokens``,
and ``state["final_env_response"]`` set by ``env_response``. The firing condition's name is stored
in ``state["stop_condition"]``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from verifiers.envs.environment import Environment
from verifiers.errors import InvalidModelResponseError, error_record, is_context_overflow, is_user_raised
from verifiers.types import AssistantMessage, State, UserMessage, to_message
from verifiers.utils.decorators import collect_hooks, stop

__all__ = ["MultiTurnEnv"]

_STOP_PLANS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def add_warning(state: State, type_: str, message: str, source: str) -> None:
    """Flag something on a rollout that is not an error (it neither stops nor zeroes the rollout):
    an empty reply, a tool result that could not be shown ... Saved as the record's ``warnings``."""
    warnings = state.get("warnings")
    if not isinstance(warnings, list):
        warnings = state["warnings"] = []
    warnings.append({"type": type_, "message": message, "source": source})


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


class MultiTurnEnv(Environment):
    """An environment in which the model and the environment take turns.

    ``max_turns`` (-1: unlimited) counts model turns; ``timeout_seconds`` bounds one rollout;
    ``max_total_completion_tokens`` (-1: unlimited) bounds completion tokens over all turns.
    """

    def __init__(
        self,
        max_turns: int = -1,
        timeout_seconds: float | None = None,
        max_total_completion_tokens: int = -1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_turns = max_turns
        self.timeout_seconds = timeout_seconds
        self.max_total_completion_tokens = max_total_completion_tokens

    # ----- hooks for subclasses --------------------------------------------------------------------

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Prepare per-rollout resources; mutate ``state`` and/or return it."""
        return state

    async def env_response(self, messages: Any, state: State, **kwargs: Any) -> Any:
        """The environment's reply to the model's last turn (messages, or OLD ``(messages, state)``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement env_response()")

    # ----- built-in stop conditions --------------------------------------------------------------

    @stop(priority=1000)
    async def has_error(self, state: State, **kwargs: Any) -> bool:
        return state.get("error") is not None

    @stop(priority=900)
    async def prompt_too_long(self, state: State, **kwargs: Any) -> bool:
        return bool(state.get("prompt_too_long"))

    @stop(priority=800)
    async def max_turns_reached(self, state: State, **kwargs: Any) -> bool:
        return self.max_turns is not None and self.max_turns > 0 and state["turn"] >= self.max_turns

    @stop(priority=700)
    async def max_total_completion_tokens_reached(self, state: State, **kwargs: Any) -> bool:
        limit = self.max_total_completion_tokens
        return limit is not None and limit > 0 and state["usage"]["completion_tokens"] >= limit

    @stop(priority=600)
    async def has_final_env_response(self, state: State, **kwargs: Any) -> bool:
        return state.get("final_env_response") is not None

    _BUILTIN_STOPS = (
        "has_error",
        "prompt_too_long",
        "max_turns_reached",
        "max_total_completion_tokens_reached",
        "has_final_env_response",
    )

    async def _run_stops(self, state: State, names: tuple[str, ...]) -> bool:
        for name in names:
            result = getattr(self, name)(state)
            if inspect.isawaitable(result):
                result = await result
            if result:
                if not state.get("stop_condition"):
                    state["stop_condition"] = name
                return True
        return False

    async def is_completed(self, *args: Any, **kwargs: Any) -> bool:
        """True when a stop condition fires (records its name in ``state["stop_condition"]``).

        Accepts NEW ``is_completed(state)`` and OLD ``is_completed(messages, state)``; OLD subclasses
        override it and may call ``super().is_completed(messages, state)``.
        """
        state = kwargs.get("state")
        if state is None:
            state = args[-1] if args else None
        if not isinstance(state, Mapping):
            raise TypeError("is_completed needs the rollout state")
        return await self._run_stops(state, collect_hooks(type(self), "stop"))

    def _overrides_is_completed(self) -> bool:
        return type(self).is_completed is not MultiTurnEnv.is_completed

    def _builtin_stop(self, state: State) -> str | None:
        """The built-in stop conditions inline (no coroutine per check: this runs twice per turn)."""
        if state.get("error") is not None:
            return "has_error"
        if state.get("prompt_too_long"):
            return "prompt_too_long"
        if self.max_turns is not None and self.max_turns > 0 and state["turn"] >= self.max_turns:
            return "max_turns_reached"
        limit = self.max_total_completion_tokens
        if limit is not None and limit > 0 and state["usage"]["completion_tokens"] >= limit:
            return "max_total_completion_tokens_reached"
        if state.get("final_env_response") is not None:
            return "has_final_env_response"
        return None

    def _stop_plan(self) -> tuple[bool, tuple[str, ...]]:
        """(built-ins can run inline, remaining @stop names), computed once per class."""
        cls = type(self)
        plan = _STOP_PLANS.get(cls)
        if plan is None:
            names = collect_hooks(cls, "stop")
            inline = all(getattr(cls, n) is getattr(MultiTurnEnv, n) for n in self._BUILTIN_STOPS) and (
                names[: len(self._BUILTIN_STOPS)] == self._BUILTIN_STOPS
            )
            rest = tuple(n for n in names if n not in self._BUILTIN_STOPS) if inline else names
            plan = (inline, rest)
            _STOP_PLANS[cls] = plan
        return plan

    async def _should_stop(self, state: State) -> bool:
        cls = type(self)
        if not self._overrides_is_completed():
            inline, rest = self._stop_plan()
            if inline:
                name = self._builtin_stop(state)
                if name is not None:
                    if not state.get("stop_condition"):
                        state["stop_condition"] = name
                    return True
            return await self._run_stops(state, rest) if rest else False
        # OLD environment: built-ins first (the classic loop enforced max_turns itself), then the
        # override, then any @stop methods the subclass also has.
        if await self._run_stops(state, self._BUILTIN_STOPS):
            return True
        if await self.is_completed(self._messages(state), state):
            if not state.get("stop_condition"):
                state["stop_condition"] = "is_completed"
            return True
        extra = tuple(n for n in collect_hooks(cls, "stop") if n not in self._BUILTIN_STOPS)
        return await self._run_stops(state, extra) if extra else False

    # ----- the loop ------------------------------------------------------------------------------

    @staticmethod
    def _messages(state: State) -> Any:
        prompt, completion = state["prompt"], state["completion"]
        if isinstance(prompt, str):
            return prompt + (completion or "")
        return prompt + completion

    async def rollout(
        self, input: Any = None, client: Any = None, model: Any = None, sampling_args: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Run one rollout.

        NEW: ``rollout(input, client, model, sampling_args=None) -> State``. OLD:
        ``rollout(client, model, prompt, answer="", task="default", info=None, sampling_args=None)
        -> (completion, state)``.
        """
        if input is None and "prompt" in kwargs:  # OLD keyword form
            input, client, model = kwargs.pop("client", client), kwargs.pop("model", model), kwargs.pop("prompt")
        if not isinstance(input, Mapping):  # OLD positional form
            client_, model_, prompt = input, client, model
            rest = [sampling_args, *args]
            names = ("answer", "task", "info", "sampling_args")
            opts = dict(zip(names, rest, strict=False))
            opts.update(kwargs)
            row = {
                "prompt": prompt,
                "answer": opts.get("answer") or "",
                "task": opts.get("task") or "default",
                "info": opts.get("info") or {},
                "example_id": kwargs.get("example_id", 0),
            }
            state = self.init_state(row)
            await self._drive(state, self._model_client(client_), model_, self._merge_sampling_args(opts.get("sampling_args")))
            return state["completion"], state
        state = self.init_state(input)
        await self._drive(state, self._model_client(client), model, self._merge_sampling_args(sampling_args))
        return state

    async def _drive(self, state: State, client: Any, model: str, sampling_args: Any) -> None:
        chat = not isinstance(state["prompt"], str)
        try:
            result = self.setup_state(state)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, Mapping) and result is not state:
                state.update(result)
        except BaseException as exc:
            if not is_user_raised(exc):
                raise
            state["error"] = error_record(exc, "setup")
            state["stop_condition"] = "has_error"
            state["is_completed"] = True
            await self._cleanup(state)
            return
        try:
            while not await self._should_stop(state):
                context = self._messages(state)
                try:
                    response = await self.get_model_response(
                        client, model, context, self.oai_tools if chat else None, sampling_args,
                        "chat" if chat else "completion",
                    )
                except BaseException as exc:
                    if not is_user_raised(exc):
                        raise
                    if is_context_overflow(exc):  # [faultsrun] the servers' own signals only (errors.py)
                        state["prompt_too_long"] = True
                        state["is_truncated"] = True
                        continue
                    state["error"] = error_record(exc, "model")
                    continue
                self._record_response(state, context, response, chat)
                if await self._should_stop(state):
                    break
                try:
                    reply = await self.env_response(self._messages(state), state)
                except BaseException as exc:
                    if not is_user_raised(exc):
                        raise
                    state["error"] = error_record(exc, "env_response")
                    continue
                self._append_env_reply(state, reply, chat)
        finally:
            state["is_completed"] = True
            await self._cleanup(state)

    def _record_response(self, state: State, context: Any, response: Any, chat: bool) -> None:
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
        totals["prompt_tokens"] += usage.get("prompt_tokens", 0) or 0
        totals["completion_tokens"] += usage.get("completion_tokens", 0) or 0
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
        if self.max_seq_len:
            used = (usage.get("prompt_tokens", 0) or 0) + (usage.get("completion_tokens", 0) or 0)
            if used >= self.max_seq_len:
                state["prompt_too_long"] = True
                state["is_truncated"] = True
        if problem is not None:
            kind, message = problem
            if kind == "empty":  # not an error (the reward decides), but never silent
                add_warning(state, "EmptyReply", message, "model")
            elif not state.get("error"):
                state["error"] = error_record(InvalidModelResponseError(message), "model")

    def _append_env_reply(self, state: State, reply: Any, chat: bool) -> None:
        if isinstance(reply, tuple) and len(reply) == 2 and (reply[1] is None or isinstance(reply[1], Mapping)):
            reply, new_state = reply
            if new_state is not None and new_state is not state:
                state.update(new_state)
        if reply is None:
            return
        if not chat:
            state["completion"] = (state["completion"] or "") + (reply if isinstance(reply, str) else str(reply))
            return
        if isinstance(reply, str):
            state["completion"].append(UserMessage(reply))
        elif isinstance(reply, Mapping):
            state["completion"].append(to_message(reply))
        else:
            state["completion"].extend(to_message(m) for m in reply)

    async def _cleanup(self, state: State) -> None:
        for name in collect_hooks(type(self), "cleanup"):
            try:
                result = getattr(self, name)(state)
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:
                if not is_user_raised(exc):
                    raise
                if not state.get("error"):
                    state["error"] = error_record(exc, "cleanup")

"""How the engine drives a classic ``Environment``: its hooks and overrides become plans.

A classic environment tells the engine what to do through methods it defines or overrides:

* ``setup_state`` / ``env_response`` / ``@vf.stop`` / ``@vf.cleanup`` (``MultiTurnEnv``): the
  :class:`~verifiers.engine.plans.TurnLoop` of the engine's turn loop;
* an overridden ``is_completed(messages, state)`` (OLD): the stop check, after the built-ins;
* an overridden ``get_model_response``: the model call of each turn;
* an overridden ``rollout`` (NEW ``rollout(input, client, model, sampling_args) -> State`` or OLD
  ``rollout(client, model, prompt, answer, task, info, sampling_args) -> (completion, state)``):
  the whole turn loop;
* an overridden ``run_rollout``: the whole rollout stage.

The defaults are recognised by a mark on the function (:func:`engine_default`), never by asking
which class an environment is, so this module imports no environment class. Plans are built per
call (``evaluate``, ``run_group`` ...), so attributes changed after construction take effect.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from verifiers.engine import stops
from verifiers.engine.plans import GroupPlan, RolloutPlan, TurnLoop
from verifiers.engine.stops import BUILTIN_STOPS
from verifiers.engine.threads import running
from verifiers.engine.turns import messages_of, play_turns
from verifiers.errors import error_record, is_user_raised
from verifiers.types import State
from verifiers.utils.async_utils import func_spec, maybe_await
from verifiers.utils.decorators import collect_hooks

__all__ = [
    "CleanupTimeoutError",
    "adopt_rollout_result",
    "engine_default",
    "group_plan",
    "old_rollout_row",
    "rollout_plan",
    "run_stops",
    "turn_loop",
]

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "_vf_engine_default"

#: Seconds one ``@vf.cleanup`` hook may take when the environment sets no ``cleanup_timeout``.
DEFAULT_CLEANUP_TIMEOUT = 60.0


def engine_default(func: F) -> F:
    """Mark a method as the engine's default, so that an override (a function without the mark)
    is recognised as the environment's own."""
    setattr(func, _MARK, True)
    return func


def _is_default(cls: type, name: str) -> bool:
    return getattr(getattr(cls, name, None), _MARK, False)


# ----- stop conditions -------------------------------------------------------------------------------

_STOP_PLANS: dict[type, tuple[tuple[str, Callable[[Any, State], bool] | None], ...]] = {}

#: The built-in stops an environment has not overridden, checked inline (no method call per turn).
_INLINE_STOPS: dict[str, Callable[[Any, State], bool]] = {
    "has_error": lambda env, state: stops.has_error(state),
    "has_final_env_response": lambda env, state: stops.has_final_env_response(state),
    "max_total_completion_tokens_reached": lambda env, state: stops.max_total_completion_tokens_reached(state, env.max_total_completion_tokens),
    "max_turns_reached": lambda env, state: stops.max_turns_reached(state, env.max_turns),
    "prompt_too_long": lambda env, state: stops.prompt_too_long(state),
}


async def run_stops(env: Any, state: State, names: tuple[str, ...]) -> bool:
    """Check the ``@vf.stop`` methods ``names`` in order; the first that fires is recorded."""
    return await _check_stops(env, state, tuple((name, None) for name in names))


async def _check_stops(env: Any, state: State, plan: tuple[tuple[str, Callable[[Any, State], bool] | None], ...]) -> bool:
    """Check the stops of ``plan`` in order (each by its inline check, else its method); the first
    that fires is recorded as the stop condition."""
    for name, quick in plan:
        if quick is not None:
            fired = quick(env, state)
        else:
            fired = getattr(env, name)(state)
            if inspect.isawaitable(fired):
                fired = await fired
        if fired:
            if not state.get("stop_condition"):
                state["stop_condition"] = name
            return True
    return False


def _stop_plan(cls: type) -> tuple[tuple[str, Callable[[Any, State], bool] | None], ...]:
    """Every ``@vf.stop`` of ``cls`` in the order they are checked (priority, then name, as the
    classic library orders them), each with its inline check when it is a built-in the class has
    not overridden (None: call the method); computed once per class."""
    plan = _STOP_PLANS.get(cls)
    if plan is None:
        plan = _STOP_PLANS[cls] = tuple(
            (name, _INLINE_STOPS.get(name) if _is_default(cls, name) else None) for name in collect_hooks(cls, "stop")
        )
    return plan


def _stop_check(env: Any) -> Callable[[State], Any]:
    cls = type(env)
    if not _is_default(cls, "is_completed"):
        extra = tuple(n for n in collect_hooks(cls, "stop") if n not in BUILTIN_STOPS)

        async def old_should_stop(state: State) -> bool:
            # OLD environment: built-ins first (the classic loop enforced max_turns itself), then the
            # override, then any @stop methods the subclass also has.
            if await run_stops(env, state, BUILTIN_STOPS):
                return True
            # classic releases accepted a sync is_completed as well as an async one
            if await maybe_await(env.is_completed(messages_of(state), state)):
                if not state.get("stop_condition"):
                    state["stop_condition"] = "is_completed"
                return True
            return await run_stops(env, state, extra) if extra else False

        return old_should_stop
    plan = _stop_plan(cls)
    return lambda state: _check_stops(env, state, plan)


# ----- the turn loop's other hooks -------------------------------------------------------------------


class CleanupTimeoutError(TimeoutError):
    """A ``@vf.cleanup`` hook overran the environment's ``cleanup_timeout``."""


def _cleanup(env: Any) -> Callable[[State], Any]:
    names = collect_hooks(type(env), "cleanup")

    async def cleanup(state: State) -> None:
        # read per call: cleanup_timeout set after construction takes effect
        limit = getattr(env, "cleanup_timeout", DEFAULT_CLEANUP_TIMEOUT)
        for name in names:
            try:
                with running(f"cleanup hook {name!r}"):
                    result = getattr(env, name)(state)
                    if not inspect.isawaitable(result):
                        continue
                    # bounded: a cleanup runs after a rollout timeout too, and one that never
                    # returns would otherwise hang the whole run
                    scope = asyncio.timeout(limit if limit is not None and limit > 0 else None)
                    try:
                        async with scope:
                            await result
                    except TimeoutError:
                        if not scope.expired():  # the hook's own TimeoutError
                            raise
                        raise CleanupTimeoutError(
                            f"cleanup hook {name!r} did not finish within cleanup_timeout {limit:g} s and was abandoned"
                        ) from None
            except BaseException as exc:
                if not is_user_raised(exc):
                    raise
                if not state.get("error"):
                    state["error"] = error_record(exc, "cleanup")

    return cleanup


def _respond(env: Any) -> Callable[[Any, State], Any]:
    env_response = env.env_response

    name = f"{type(env).__name__}.env_response"

    async def respond(messages: Any, state: State) -> Any:
        with running(name):  # named for the stall watchdog (a sync one runs on the loop, as classic did)
            reply = env_response(messages, state)
            if inspect.isawaitable(reply):
                reply = await reply
        if isinstance(reply, tuple) and len(reply) == 2 and (reply[1] is None or isinstance(reply[1], Mapping)):
            reply, new_state = reply  # OLD: (messages, state)
            if new_state is not None and new_state is not state:
                state.update(new_state)
        return reply

    return respond


def chat_sampling(sampling_args: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A classic chat request's sampling arguments as both classic generations send them:
    ``max_tokens`` goes out as ``max_completion_tokens`` (the name OpenAI's reasoning models
    require; OpenAI-compatible servers take both), and an unset (None) token limit is left out."""
    if not sampling_args or ("max_tokens" not in sampling_args and sampling_args.get("max_completion_tokens", 0) is not None):
        return sampling_args
    out = dict(sampling_args)
    limit = out.pop("max_tokens", None)
    if limit is not None:
        out["max_completion_tokens"] = limit
    elif out.get("max_completion_tokens", 0) is None:
        del out["max_completion_tokens"]
    return out


def turn_loop(env: Any) -> TurnLoop:
    """The engine's turn loop over ``env``'s hooks."""
    cls = type(env)
    request = None
    if not _is_default(cls, "get_model_response"):
        get_model_response = env.get_model_response

        def request(client: Any, model: str, context: Any, tools: Any, sampling_args: Any, message_type: str) -> Any:
            return get_model_response(client, model, context, tools, sampling_args, message_type)
    else:

        def request(client: Any, model: str, context: Any, tools: Any, sampling_args: Any, message_type: str) -> Any:
            if message_type == "chat":
                return client.chat(model=model, messages=context, tools=tools, sampling_args=chat_sampling(sampling_args))
            return client.completion(model=model, prompt=context, sampling_args=sampling_args)

    return TurnLoop(
        setup=env.setup_state,
        respond=_respond(env),
        should_stop=_stop_check(env),
        cleanup=_cleanup(env),
        request=request,
        tools=env.oai_tools,
        max_seq_len=env.max_seq_len,
        # an OLD environment (its own ``is_completed``) ran in the 0.1.x loop, which checked again
        # after each reply; a NEW one (``@vf.stop`` methods) in the 0.3.x loop, which does not
        stop_after_reply=not _is_default(cls, "is_completed"),
    )


# ----- custom rollouts (OLD and NEW signatures) ------------------------------------------------------


def adopt_rollout_result(state: State, result: Any) -> State:
    """Merge what a custom ``rollout`` returned into ``state``: a state (NEW) or OLD
    ``(completion, state)``."""
    if isinstance(result, tuple) and len(result) == 2:  # OLD: (completion, state)
        completion, st = result
        if isinstance(st, Mapping):
            state.update(st)
        state["completion"] = completion
    elif isinstance(result, Mapping):
        state.update(result)
    return state


def _custom_rollout(env: Any) -> Callable[..., Any]:
    async def play(state: State, client: Any, model: str, sampling_args: Mapping[str, Any]) -> None:
        names = func_spec(env.rollout).names
        if names and names[0] == "client":  # OLD: rollout(client, model, prompt, answer, task, info, sampling_args)
            result = await env.rollout(
                client, model, state["prompt"], state.get("answer", ""), state.get("task", "default"),
                state.get("info", {}), sampling_args,
            )
        else:
            result = await env.rollout(dict(state), client, model, sampling_args)
        adopt_rollout_result(state, result)
        state["is_completed"] = True

    return play


def old_rollout_row(input: Any, client: Any, model: Any, sampling_args: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any, Any, bool]:
    """The classic ``rollout`` call shapes, as ``(row, client, model, sampling_args, old)``.

    NEW: ``rollout(input, client, model, sampling_args=None)``. OLD: ``rollout(client, model,
    prompt, answer="", task="default", info=None, sampling_args=None)`` (positionally, or with
    ``prompt=`` as a keyword); ``old`` says the caller wants ``(completion, state)`` back.
    """
    if input is None and "prompt" in kwargs:  # OLD keyword form
        input, client, model = kwargs.pop("client", client), kwargs.pop("model", model), kwargs.pop("prompt")
    if isinstance(input, Mapping):
        return input, client, model, sampling_args, False
    client_, model_, prompt = input, client, model  # OLD positional form
    opts = dict(zip(("answer", "task", "info", "sampling_args"), [sampling_args, *args], strict=False))
    opts.update(kwargs)
    row = {
        "prompt": prompt,
        "answer": opts.get("answer") or "",
        "task": opts.get("task") or "default",
        "info": opts.get("info") or {},
        "example_id": kwargs.get("example_id", 0),
    }
    return row, client_, model_, opts.get("sampling_args"), True


# ----- plans -----------------------------------------------------------------------------------------


def rollout_plan(env: Any, *, sampling_args: Mapping[str, Any] | None = None, whole: bool = True) -> RolloutPlan:
    """The plan of one of ``env``'s rollouts. ``whole=False`` ignores an overridden
    ``run_rollout`` (the override itself calling the default must not loop back into it)."""
    cls = type(env)
    replace = env.run_rollout if whole and not _is_default(cls, "run_rollout") else None
    turns = turn_loop(env) if _is_default(cls, "rollout") else None
    return RolloutPlan(
        init_state=env.init_state,
        turns=turns,
        play=None if turns is not None else _custom_rollout(env),
        replace_rollout=replace,
        timeout=getattr(env, "timeout_seconds", None),
        sampling_args=dict(sampling_args or {}),
    )


def group_plan(env: Any) -> GroupPlan:
    """Every row of ``env``'s groups gets the same plan; ``env.rubric`` scores, and a multi-turn
    environment's monitor metrics follow (:class:`MonitoredScorer`)."""
    plan = rollout_plan(env)
    scorer = MonitoredScorer(env) if hasattr(env, "max_turns") else env.rubric
    return GroupPlan(plan_for=lambda row: plan, scorer=scorer)


class MonitoredScorer:
    """``env.rubric``, then the metrics the classic 0.3 library's environments add to every rollout
    by themselves (weight 0, after the rubric's own): ``num_turns`` (the model turns) on a multi-turn
    environment (a single-turn one too), and on a tool environment ``total_tool_calls`` and
    ``<tool>_calls`` for each of its tools. A metric the rubric already wrote keeps its value."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def get_reward_func_names(self) -> list[str]:
        return self.env.rubric.get_reward_func_names()

    async def score_group(self, states: Sequence[State]) -> None:
        await self.env.rubric.score_group(states)
        for state in states:
            metrics = state.get("metrics")
            if isinstance(metrics, dict):
                for name, value in monitor_metrics(self.env, state).items():
                    metrics.setdefault(name, value)


def monitor_names(env: Any) -> list[str]:
    """The monitor metrics :class:`MonitoredScorer` adds for ``env`` (none for an environment
    without turns)."""
    if not hasattr(env, "max_turns"):
        return []
    names = ["num_turns"]
    if hasattr(env, "tool_map"):
        names += ["total_tool_calls", *(f"{name}_calls" for name in env.tool_map)]
    return names


def monitor_metrics(env: Any, state: Mapping[str, Any]) -> dict[str, float]:
    """``env``'s monitor metrics of one finished rollout (:func:`monitor_names`)."""
    if not hasattr(env, "max_turns"):
        return {}
    trajectory = state.get("trajectory")
    out = {"num_turns": float(len(trajectory) if isinstance(trajectory, list) else state.get("turn") or 0)}
    tools = getattr(env, "tool_map", None)
    if tools is not None:
        counts = _tool_call_counts(state.get("completion"))
        out["total_tool_calls"] = float(sum(counts.values()))
        for name in tools:
            out[f"{name}_calls"] = float(counts.get(name, 0))
    return out


def _tool_call_counts(completion: Any) -> dict[str, int]:
    """Tool calls by name in the assistant messages of ``completion``."""
    counts: dict[str, int] = {}
    if not isinstance(completion, list):
        return counts
    for message in completion:
        get = getattr(message, "get", None)
        if get is None or get("role") != "assistant":
            continue
        for call in get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else getattr(call, "function", None)
            name = (function.get("name") if isinstance(function, Mapping) else getattr(function, "name", None)) or getattr(call, "name", None)
            if isinstance(name, str):
                counts[name] = counts.get(name, 0) + 1
    return counts


async def play_default_turns(env: Any, state: State, client: Any, model: str, sampling_args: Mapping[str, Any]) -> None:
    """The default ``rollout``'s work: the engine's turn loop over ``env``'s hooks."""
    await play_turns(turn_loop(env), state, client, model, sampling_args)

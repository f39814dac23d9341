"""``ToolEnv``: the model calls Python functions as tools until it answers without a tool call.

Every tool call of one model turn runs concurrently (``asyncio.gather``): async tools on the event
loop, sync tools in the lane of sync environment code (``engine/threads.py``: off the loop, one call
at a time as the original runs them, unless ``VF_SYNC_WORKERS`` says more). Bad calls never crash a
rollout: malformed JSON arguments, an unknown tool, wrong arguments and exceptions raised by the tool
come back to the model as tool messages (``error_formatter``, by default the exception's own text as
the classic library writes it: a parse error's message, ``str(e)``), unless the exception type is listed
in ``stop_errors``, which ends the rollout with ``error`` source ``tool:<name>``.

Hostile or broken tools cannot hang or sink a run: ``tool_timeout`` bounds each call, counted from its
start (a sync tool's wait for the lane is not counted; one left running keeps only its daemon thread
busy, outside the lane, so abandoned calls never starve new ones; the process still exits at the end
of the run). A call that overruns
``tool_timeout`` is a recorded error (``ToolTimeoutError``, source ``tool:<name>``), the model is told
it did not finish, and the rollout ends. An ``async`` tool that blocks the event loop cannot be
interrupted; when it returns past ``tool_timeout`` it is the same recorded error, naming the blocking. A
result longer than ``max_tool_output_chars`` is cut with a marker, a turn asking for more than
``max_tool_calls_per_turn`` calls gets an error message for the extra ones, and a result whose
``str()`` raises comes back as an error message. ``SystemExit`` / ``KeyboardInterrupt`` / a stray
``CancelledError`` raised by a tool end that rollout with error source ``tool:<name>`` (a real
cancellation of the run still cancels).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.engine.threads import call_sync
from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.errors import ToolError, error_record, is_user_raised
from verifiers.types import State, ToolCall, ToolMessage
from verifiers.utils.decorators import stop
from verifiers.utils.tool_utils import convert_func_to_oai_tool

__all__ = ["ToolEnv"]


def _default_error_formatter(exc: BaseException) -> str:
    """What the model reads of a failed call by default: the exception's own text, as both classic
    generations write it (``str(e)``)."""
    return str(exc)


class _ToolArgumentError(Exception):
    """Arguments the model sent could not be used (bad JSON, not an object); ``cause`` is what the
    error formatter is given, as the classic library hands it the parse error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ToolTimeoutError(ToolError):
    """A tool call overran ``tool_timeout`` (abandoned, or an async tool that blocked the loop)."""


class _ToolAborted(Exception):
    """A tool raised SystemExit / KeyboardInterrupt / a stray CancelledError: recorded, rollout ends."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _is_async_tool(tool: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(tool) or inspect.iscoroutinefunction(type(tool).__call__)


def _truncate(text: str, limit: int | None) -> str:
    if limit is None or limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... tool output truncated: {len(text) - limit} of {len(text)} characters not shown]"


class ToolEnv(MultiTurnEnv):
    """Tool use with plain Python functions; schemas come from type hints and docstrings."""

    def __init__(
        self,
        tools: Sequence[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        error_formatter: Callable[[BaseException], str] = _default_error_formatter,
        stop_errors: Sequence[type[BaseException]] | None = None,
        tool_timeout: float | None = None,
        max_tool_output_chars: int | None = 100_000,
        max_tool_calls_per_turn: int | None = 32,
        **kwargs: Any,
    ) -> None:
        """``tool_timeout``: seconds one tool call may take (None: no limit); the model gets an error
        message when it runs out. ``max_tool_output_chars`` / ``max_tool_calls_per_turn``: caps
        (None: no cap)."""
        if tool_timeout is not None and tool_timeout <= 0:
            raise ValueError("tool_timeout must be positive (or None: no limit)")
        self.tool_timeout = tool_timeout
        self.max_tool_output_chars = max_tool_output_chars
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.tools: list[Callable[..., Any]] = []
        self.tool_map: dict[str, Callable[..., Any]] = {}
        self.skipped_args: dict[str, list[str]] = {}
        self.error_formatter = error_formatter
        self.stop_errors: tuple[type[BaseException], ...] = tuple(stop_errors or ())
        super().__init__(max_turns=max_turns, **kwargs)
        for tool in tools or []:
            self.add_tool(tool)

    # ----- tool registry -------------------------------------------------------------------------

    @staticmethod
    def _tool_name(tool: Callable[..., Any]) -> str:
        return getattr(tool, "__name__", None) or type(tool).__name__

    def _rebuild_schemas(self) -> None:
        self.oai_tools = [
            convert_func_to_oai_tool(t, self.skipped_args.get(self._tool_name(t), ())) for t in self.tools
        ] or None

    def add_tool(self, tool: Callable[..., Any], args_to_skip: Sequence[str] = ()) -> None:
        """Register ``tool``; arguments in ``args_to_skip`` are hidden from the model's schema."""
        name = self._tool_name(tool)
        if name in self.tool_map:
            self.tools = [t for t in self.tools if self._tool_name(t) != name]
        self.tools.append(tool)
        self.tool_map[name] = tool
        if args_to_skip:
            self.skipped_args[name] = list(args_to_skip)
        self._rebuild_schemas()

    def remove_tool(self, tool: Callable[..., Any] | str) -> None:
        name = tool if isinstance(tool, str) else self._tool_name(tool)
        self.tools = [t for t in self.tools if self._tool_name(t) != name]
        self.tool_map.pop(name, None)
        self.skipped_args.pop(name, None)
        self._rebuild_schemas()

    # ----- stop condition ------------------------------------------------------------------------

    @stop
    async def no_tools_called(self, state: State, **kwargs: Any) -> bool:
        """The model's last turn made no tool call: it has answered."""
        completion = state.get("completion")
        if not completion or isinstance(completion, str):
            return False
        last = completion[-1]
        return last.get("role") == "assistant" and not last.get("tool_calls")

    # ----- running tools -------------------------------------------------------------------------

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any] | str, tool_call_id: str, **kwargs: Any) -> ToolMessage:
        """Run one tool and return its tool message (errors become the message content, except
        ``stop_errors``, which propagate)."""
        tool = self.tool_map.get(tool_name)
        if tool is None:
            # a name the env does not have: the lookup's KeyError, formatted (or stopping the
            # rollout) as any tool error is, which is what the model reads in both generations
            missing = KeyError(tool_name)
            if isinstance(missing, self.stop_errors):
                raise missing
            return ToolMessage(self.error_formatter(missing), tool_call_id=tool_call_id)
        if isinstance(tool_args, str):
            tool_args = self._parse_args(tool_name, tool_args)
        try:
            if self.tool_timeout is not None and not _is_async_tool(tool):
                # the lane runs it: its timeout counts from when it starts, not while it waits
                try:
                    result = await self._invoke(tool, tool_args, self.tool_timeout)
                except TimeoutError:
                    raise _ToolAborted(ToolTimeoutError(
                        f"tool {tool_name!r} did not finish within {self.tool_timeout:g} s and was abandoned"
                    )) from None
            elif self.tool_timeout is not None:
                loop = asyncio.get_running_loop()
                started = loop.time()
                try:
                    async with asyncio.timeout(self.tool_timeout):
                        result = await self._invoke(tool, tool_args)
                except TimeoutError:
                    raise _ToolAborted(ToolTimeoutError(
                        f"tool {tool_name!r} did not finish within {self.tool_timeout:g} s and was abandoned"
                    )) from None
                took = loop.time() - started
                if took > self.tool_timeout:
                    # an async tool that never yields cannot be cancelled: it "returned", but blocked
                    # every other rollout meanwhile; its result is not used
                    raise _ToolAborted(ToolTimeoutError(
                        f"async tool {tool_name!r} blocked the event loop for {took:.3g} s, past tool_timeout "
                        f"{self.tool_timeout:g} s (do blocking work in a sync tool or with asyncio.to_thread)"
                    ))
            else:
                result = await self._invoke(tool, tool_args)
            text = result if isinstance(result, str) else str(result)
        except (_ToolAborted, *self.stop_errors):
            raise
        except BaseException as exc:
            if not is_user_raised(exc):
                raise
            if not isinstance(exc, Exception):
                raise _ToolAborted(exc) from None
            return ToolMessage(self.error_formatter(exc), tool_call_id=tool_call_id)
        return ToolMessage(_truncate(text, self.max_tool_output_chars), tool_call_id=tool_call_id)

    async def _invoke(self, tool: Callable[..., Any], tool_args: dict[str, Any], timeout: float | None = None) -> Any:
        if _is_async_tool(tool):
            return await tool(**tool_args)
        # a sync tool runs in the lane of sync environment code (engine/threads.py): off the event
        # loop, one call at a time as the original runs it, abandoned when its caller gives up
        result = await call_sync(tool, (), tool_args, timeout=timeout, off_main=True)
        if inspect.isawaitable(result):
            result = await result
        return result

    @staticmethod
    def _parse_args(tool_name: str, raw: Any) -> dict[str, Any]:
        if raw is None or raw == "":
            return {}
        if isinstance(raw, dict):
            return raw
        try:
            args = json.loads(raw)
        except (TypeError, ValueError) as exc:
            raise _ToolArgumentError(exc) from None
        if not isinstance(args, dict):  # what calling the tool with them would raise
            raise _ToolArgumentError(TypeError(f"{tool_name}() argument after ** must be a mapping, not {type(args).__name__}"))
        return args

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: State, **kwargs: Any) -> dict[str, Any]:
        """Adjust a call's arguments before it runs (StatefulToolEnv injects hidden ones)."""
        return tool_args

    async def _run_call(self, call: Any, messages: Any, state: State) -> ToolMessage:
        tc = call if isinstance(call, ToolCall) else ToolCall(call)
        name = tc.name or ""
        call_id = tc.id or ""
        try:
            args = self._parse_args(name, (tc.get("function") or {}).get("arguments"))
        except _ToolArgumentError as exc:
            return ToolMessage(self.error_formatter(exc.cause), tool_call_id=call_id)
        if name in self.tool_map:
            updated = self.update_tool_args(tool_name=name, tool_args=args, messages=messages, state=state)
            if inspect.isawaitable(updated):
                updated = await updated
            args = updated if updated is not None else args
        try:
            return await self.call_tool(name, args, call_id)
        except _ToolAborted as exc:
            if not state.get("error"):
                state["error"] = error_record(exc.cause, f"tool:{name}")
            return ToolMessage(self.error_formatter(exc.cause), tool_call_id=call_id)
        except self.stop_errors as exc:
            if not state.get("error"):
                state["error"] = error_record(exc, f"tool:{name}")
            return ToolMessage(self.error_formatter(exc), tool_call_id=call_id)

    async def env_response(self, messages: Any, state: State, **kwargs: Any) -> list[ToolMessage]:
        last = messages[-1] if messages else None
        calls = (last.get("tool_calls") if isinstance(last, dict) else None) or []
        if not calls or not isinstance(calls, list):
            return []
        cap = self.max_tool_calls_per_turn
        refused: list[ToolMessage] = []
        if cap is not None and cap > 0 and len(calls) > cap:
            # every call needs an answer (the API requires it), but only the first `cap` run
            refused = [
                ToolMessage(
                    f"Error: at most {cap} tool calls per turn; this call was not run.",
                    tool_call_id=(ToolCall(c).id if isinstance(c, dict) else None) or "",
                )
                for c in calls[cap:]
            ]
            calls = calls[:cap]
        if len(calls) == 1:
            return [await self._run_call(calls[0], messages, state), *refused]
        return [*await asyncio.gather(*(self._run_call(c, messages, state) for c in calls)), *refused]

"""Calling user-supplied functions (reward functions, stop conditions, hooks) cheaply.

User functions may be sync or async and receive only the keyword arguments they name (or all of
them with ``**kwargs``). Inspecting a signature costs microseconds, which adds up at thousands of
rollouts per second, so each function's signature is inspected once and cached.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FuncSpec",
    "NullAsyncContext",
    "SyncOrAsync",
    "call_with_kwargs",
    "func_name",
    "func_spec",
    "maybe_await",
    "maybe_call_with_named_args",
    "maybe_semaphore",
    "run_sync",
    "wait_for",
    "with_sem",
]


@dataclass(frozen=True, slots=True)
class FuncSpec:
    """What a function accepts: its named keyword parameters and whether it takes ``**kwargs``."""

    names: tuple[str, ...]
    var_kw: bool


_SPECS: dict[Any, FuncSpec] = {}


def func_spec(func: Callable[..., Any]) -> FuncSpec:
    """The (cached) :class:`FuncSpec` of ``func``."""
    try:
        return _SPECS[func]
    except (KeyError, TypeError):
        pass
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        spec = FuncSpec((), True)
    else:
        names = []
        var_kw = False
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                var_kw = True
            elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names.append(p.name)
        spec = FuncSpec(tuple(names), var_kw)
    try:
        _SPECS[func] = spec
    except TypeError:  # unhashable callable object
        pass
    return spec


def call_with_kwargs(func: Callable[..., Any], available: Mapping[str, Any]) -> Any:
    """Call ``func`` with the subset of ``available`` it accepts (all of it with ``**kwargs``).

    Returns whatever ``func`` returns (possibly an awaitable; see :func:`maybe_await`).
    """
    spec = func_spec(func)
    if spec.var_kw:
        return func(**available)
    return func(**{k: available[k] for k in spec.names if k in available})


async def maybe_await(value: Any, *args: Any, **kwargs: Any) -> Any:
    """The result of a sync-or-async call, awaited when needed.

    ``maybe_await(func, *args, **kwargs)`` calls ``func`` (the classic form); ``maybe_await(value)``
    awaits an awaitable ``value`` and returns anything else unchanged.
    """
    if callable(value) and not inspect.isawaitable(value):
        value = value(*args, **kwargs)
    if inspect.isawaitable(value):
        return await value
    return value


async def maybe_call_with_named_args(func: Callable[..., Any], **objects: Any) -> Any:
    """Call ``func`` with the keyword arguments it names (all of them if it takes ``**kwargs``)."""
    return await maybe_await(call_with_kwargs(func, objects))


class NullAsyncContext:
    """``async with`` that does nothing (an unlimited semaphore)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> bool:
        return False


async def maybe_semaphore(limit: int | None = None) -> Any:
    """An ``asyncio.Semaphore(limit)``, or a no-op context when ``limit`` is ``None`` or < 1."""
    if limit and limit > 0:
        return asyncio.Semaphore(limit)
    return NullAsyncContext()


async def wait_for(aw: Awaitable[Any], timeout: float | None) -> Any:
    """``aw``'s result, or ``TimeoutError`` after ``timeout`` seconds (``None``: no limit).

    Use this, never ``asyncio.wait_for`` (the lint bans it). On Python 3.11 ``asyncio.wait_for``
    loses a cancellation of the waiting task that lands in the same loop iteration as ``aw``'s
    result: it returns the result and the task runs on. ``asyncio.run`` turns Ctrl-C into exactly
    one such cancellation, so a run whose Ctrl-C met a reply (a health check, a batch wake-up) never
    stopped. Here the limit is an ``asyncio.timeout`` scope, which tells its own expiry from an
    outside cancellation and always re-raises the latter (3.12's ``wait_for`` is built the same way).
    Unlike 3.11's, a coroutine runs in the calling task, not in a new one.
    """
    if timeout is None:
        return await aw
    async with asyncio.timeout(timeout):
        return await aw


async def with_sem(sem: Any, coro: Any) -> Any:
    """Await ``coro`` while holding ``sem``."""
    async with sem:
        return await coro


def func_name(func: Callable[..., Any]) -> str:
    """A readable name for a function, partial or callable object."""
    name = getattr(func, "__name__", None)
    if name:
        return name
    inner = getattr(func, "func", None)  # functools.partial
    if inner is not None:
        return func_name(inner)
    return type(func).__name__


# The classic sync/async bridge lives with the classic adapter; re-exported here, its classic home.
from verifiers.classic.bridge import SyncOrAsync, run_sync  # noqa: E402

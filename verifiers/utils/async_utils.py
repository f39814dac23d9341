"""Calling user-supplied functions (reward functions, stop conditions, hooks) cheaply.

User functions may be sync or async and receive only the keyword arguments they name (or all of
them with ``**kwargs``). Inspecting a signature costs microseconds, which adds up at thousands of
rollouts per second, so each function's signature is inspected once and cached.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FuncSpec", "call_with_kwargs", "func_name", "func_spec", "maybe_await"]


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


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (async user functions), else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


def func_name(func: Callable[..., Any]) -> str:
    """A readable name for a function, partial or callable object."""
    name = getattr(func, "__name__", None)
    if name:
        return name
    inner = getattr(func, "func", None)  # functools.partial
    if inner is not None:
        return func_name(inner)
    return type(func).__name__

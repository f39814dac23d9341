"""``@vf.reward``, ``@vf.metric``, ``@vf.stop``, ``@vf.tool``, ``@vf.intercept``: mark a method.

A decorator only tags the function (``fn.reward = True`` plus its metadata); the class that owns
it collects the tagged methods (:func:`discover_decorated`) and the scoring runner
(``verifiers.v1.scoring``) calls them with the arguments they name. Each works bare
(``@vf.reward``) and with arguments (``@vf.reward(weight=0.5)``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])


def _tag(kind: str, **meta: Any) -> Callable[[F], F]:
    def apply(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@vf.{kind} decorates a function, not {type(fn).__name__}")
        setattr(fn, kind, True)
        for key, value in meta.items():
            setattr(fn, key, value)
        return fn

    return apply


@overload
def reward(func: F, weight: float = 1.0, priority: int = 0) -> F: ...
@overload
def reward(func: None = None, weight: float = 1.0, priority: int = 0) -> Callable[[F], F]: ...
def reward(func: F | None = None, weight: float = 1.0, priority: int = 0) -> Any:
    """A weighted reward of a task: returns a number, or ``{name: number}`` for several."""
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight != weight:
        raise TypeError(f"@vf.reward weight must be a finite number, got {weight!r}")
    tag = _tag("reward", reward_priority=priority, reward_weight=float(weight))
    return tag if func is None else tag(func)


@overload
def metric(func: F, priority: int = 0) -> F: ...
@overload
def metric(func: None = None, priority: int = 0) -> Callable[[F], F]: ...
def metric(func: F | None = None, priority: int = 0) -> Any:
    """A recorded, unweighted measurement: returns a number or ``{name: number}``."""
    tag = _tag("metric", metric_priority=priority)
    return tag if func is None else tag(func)


@overload
def stop(func: F, priority: int = 0) -> F: ...
@overload
def stop(func: None = None, priority: int = 0) -> Callable[[F], F]: ...
def stop(func: F | None = None, priority: int = 0) -> Any:
    """A predicate on a ``Trace``, a ``Request`` or a ``Response`` that ends the rollout when true."""
    tag = _tag("stop", stop_priority=priority)
    return tag if func is None else tag(func)


@overload
def intercept(func: F, priority: int = 0) -> F: ...
@overload
def intercept(func: None = None, priority: int = 0) -> Callable[[F], F]: ...
def intercept(func: F | None = None, priority: int = 0) -> Any:
    """Sees a ``Request`` or a ``Response`` on its way; returns a replacement or None (unchanged)."""
    tag = _tag("intercept", intercept_priority=priority)
    return tag if func is None else tag(func)


@overload
def tool(func: F, name: str | None = None) -> F: ...
@overload
def tool(func: None = None, name: str | None = None) -> Callable[[F], F]: ...
def tool(func: F | None = None, name: str | None = None) -> Any:
    """A toolset method offered to the model (its name, unless ``name``; its docstring describes it)."""
    tag = _tag("tool", tool_name=name)
    return tag if func is None else tag(func)


@functools.lru_cache(maxsize=4096)
def _tagged_names(cls: type, kind: str) -> tuple[str, ...]:
    # collected once per class: a rollout's scoring only binds them
    return tuple(sorted({name for klass in cls.__mro__ for name, value in vars(klass).items() if getattr(value, kind, False) is True}))


def discover_decorated(obj: object, kind: str) -> list[Callable[..., Any]]:
    """``obj``'s bound methods tagged ``kind``, highest priority first, then by name.

    The class dictionaries along the MRO are read (not ``getattr`` on every attribute, which
    would run properties), and each name is bound through ``getattr`` so the most derived
    definition wins: an undecorated override switches a decorated base method off."""
    methods = [m for name in _tagged_names(type(obj), kind) if getattr(m := getattr(obj, name), kind, False) is True]
    if len(methods) > 1:
        methods.sort(key=lambda m: (-getattr(m, f"{kind}_priority", 0), m.__name__))
    return methods

"""Plugins by id: which module an id names, which class it exports, which config class it takes.

A v1 plugin (taskset, environment, harness, judge) is a package whose ``__all__`` exports exactly
one subclass of the plugin's base class. An id ``owner/name@version`` names the module ``name``
(owner and version dropped, ``-`` -> ``_``, lowercased); a built-in module under the kind's
package (``verifiers.v1.tasksets.<module>``) is tried first.

A config field that holds a sub-plugin's config (``taskset``, ``harness``, a runtime) is
*narrowed*: the raw dict or TOML table is validated into the concrete config class its ``id``
(or, for runtimes, its ``type``) names, so the plugin's own knobs are checked and typed. The
classes come from a registry keyed by ``(kind, id)``; a kind may have a resolver that finds an
unregistered id by importing its package (tasksets do).
"""

from __future__ import annotations

import importlib
import importlib.util
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

ID = str
"""A plugin id: the name of an installed package that exports the plugin (``owner/name@1.0`` works)."""

# kind -> the package holding the built-in plugins of that kind
BUILTIN_PACKAGES: dict[str, str] = {
    "taskset": "verifiers.v1.tasksets",
    "environment": "verifiers.v1.envs",
    "harness": "verifiers.v1.harnesses",
    "judge": "verifiers.v1.judges",
}

_CONFIGS: dict[str, dict[str, type[BaseModel]]] = {}
_RESOLVERS: dict[str, Callable[[str], type[BaseModel]]] = {}


class PluginError(ValueError):
    """A plugin id that names nothing usable, or a plugin package that breaks the convention.

    A ``ValueError`` so that raised inside a pydantic validator it becomes a validation error
    with the field's location."""


def plugin_module_name(plugin_id: str) -> str:
    """The module an id names.

    >>> plugin_module_name("alice/My-Taskset@1.2.0")
    'my_taskset'
    """
    from verifiers.ids import module_name_for, parse_env_id  # on first lookup: not part of defining a taskset

    try:
        name = parse_env_id(plugin_id).name
    except ValueError as exc:
        # a path (``./envs/my_taskset``, ``a/b/my-taskset``) names its last part, as the original reads it
        last = plugin_id.rstrip("/").rsplit("/", 1)[-1]
        try:
            if "/" not in plugin_id or not last:
                raise ValueError(plugin_id)
            name = parse_env_id(last).name
        except ValueError:
            raise PluginError(f"invalid plugin id {plugin_id!r}: expected name, owner/name or owner/name@version") from exc
    return module_name_for(name).lower()


def import_plugin(plugin_id: str, kind: str) -> ModuleType:
    """Import the package ``plugin_id`` names: the built-in one of ``kind`` if it exists, else the
    installed module. A missing package is one ``ModuleNotFoundError`` naming what was tried."""
    module = plugin_module_name(plugin_id)
    builtin = f"{BUILTIN_PACKAGES[kind]}.{module}" if kind in BUILTIN_PACKAGES else None
    target = builtin if builtin and _spec_exists(builtin) else module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise ModuleNotFoundError(
                f"{kind} {plugin_id!r} not found: no module {target!r}. {'An' if kind[0] in 'aeiou' else 'A'} {kind} is an installed package "
                f"whose __all__ exports its {kind} class; install it first.",
                name=target,
            ) from None
        raise  # the package exists, one of its own imports failed: show that


def _spec_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def plugin_class(module: ModuleType, base: type, kind: str) -> type:
    """The one subclass of ``base`` that ``module.__all__`` exports."""
    names = getattr(module, "__all__", None)
    if names is None:
        raise PluginError(f"{kind} module {module.__name__!r} has no __all__; list its {base.__name__} subclass there")
    found = []
    for name in names:
        obj = getattr(module, name, None)
        if isinstance(obj, type) and issubclass(obj, base) and obj is not base and obj not in found:
            found.append(obj)
    if not found:
        raise PluginError(
            f"{kind} module {module.__name__!r} exports no {base.__name__} subclass in __all__ (it lists {list(names)})"
        )
    if len(found) > 1:
        raise PluginError(
            f"{kind} module {module.__name__!r} exports {len(found)} {base.__name__} subclasses in __all__ "
            f"({', '.join(c.__name__ for c in found)}); export exactly one"
        )
    return found[0]


_CONCRETE: weakref.WeakKeyDictionary[type, dict[tuple[type, type | None], type | None]] = weakref.WeakKeyDictionary()


def concrete_type(cls: type, bound: type, *, origin: type | None = None) -> type | None:
    """The first type argument bounded by ``bound`` in the generic bases along ``cls``'s MRO
    (``class MyTask(Task[MyData, MyState, MyConfig])`` -> ``MyConfig`` for ``bound=TaskConfig``).
    A class's bases do not change: each answer is found once (every rollout asks for its task's
    state and config classes)."""
    try:
        answers = _CONCRETE.setdefault(cls, {})
    except TypeError:  # an unhashable class: no cache
        return _concrete_type(cls, bound, origin)
    key = (bound, origin)
    if key not in answers:
        answers[key] = _concrete_type(cls, bound, origin)
    return answers[key]


def _concrete_type(cls: type, bound: type, origin: type | None) -> type | None:
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if origin is not None and get_origin(base) is not origin:
                continue
            for arg in get_args(base):
                if isinstance(arg, type) and issubclass(arg, bound):
                    return arg
    return None


def register_config(kind: str, plugin_id: str, config_cls: type[BaseModel]) -> type[BaseModel]:
    """Make ``plugin_id`` of ``kind`` narrow to ``config_cls`` (later registrations win)."""
    _CONFIGS.setdefault(kind, {})[plugin_id] = config_cls
    return config_cls


def register_resolver(kind: str, resolver: Callable[[str], type[BaseModel]]) -> None:
    """How ids of ``kind`` that nobody registered find their config class (by import)."""
    _RESOLVERS[kind] = resolver


def registered_ids(kind: str) -> list[str]:
    return sorted(_CONFIGS.get(kind, {}))


def config_class(kind: str, plugin_id: str) -> type[BaseModel]:
    """The config class ``plugin_id`` narrows to."""
    known = _CONFIGS.get(kind, {})
    if plugin_id in known:
        return known[plugin_id]
    resolver = _RESOLVERS.get(kind)
    if resolver is None:
        choices = ", ".join(sorted(known)) or "none"
        raise PluginError(f"unknown {kind} {plugin_id!r} (known: {choices})")
    return resolver(plugin_id)


def narrow_field(data: Any, field: str, kind: str, *, key: str = "id", default: str | None = None) -> None:
    """Validate ``data[field]`` (a dict, a TOML table or a config object) in place into the
    config class its ``key`` names. A field without ``key`` and without ``default`` is left alone."""
    if not isinstance(data, dict) or (field not in data and default is None):
        return
    raw = data.get(field)
    if raw is None and default is None:
        return
    if isinstance(raw, BaseModel):
        raw = raw.model_dump(exclude_unset=True) | {key: getattr(raw, key, None)}
    if raw is not None and not isinstance(raw, dict):
        raise PluginError(f"{field} must be a table with an {key!r} key, not {type(raw).__name__}")
    raw = dict(raw or {})
    ident = raw.get(key) or default
    if not ident:
        return
    if not isinstance(ident, str):
        raise PluginError(f"{field}.{key} must be a string, got {ident!r}")
    cls = config_class(kind, ident)
    try:
        data[field] = cls.model_validate({**raw, key: ident})
    except ValidationError as exc:
        raise PluginError(f"{field} ({kind} {ident!r}): {validation_message(exc)}") from None


def validation_message(exc: ValidationError, prefix: str = "") -> str:
    """One line for a validation error: ``loc: message`` per error; an error our own validators
    raised (a nested plugin's) keeps its message without pydantic's "Value error, " prefix."""
    parts = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)

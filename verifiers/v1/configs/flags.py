"""Command-line values typed by the config field they land in, as the original's typed flags are.

A dotted flag (``--env.taskset.subset 2024``) reaches a config as :class:`FlagText`: the text as
written. Where its field takes text (``str``, a path, an enum, a ``Literal`` of strings, a union
with one of these) it stays text (``"2024"``, ``"true"``, ``"[1]"``, ``"null"``); any other field
reads it as JSON when it parses (a number, a bool, a list, a table, ``null``), else as the text,
for pydantic to check. A table is typed field by field (a config class types its own fields when
it is validated, narrowed plugin configs included). Values from a config file are typed already
and pass through untouched.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel


class FlagText(str):
    """A command-line value as written, typed later by the field it lands in."""

    __slots__ = ()


class _Bare(FlagText):
    """A knob flag written with no value: true for a true/false knob, refused by any other."""

    __slots__ = ()


BARE = _Bare("true")


def json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return str(text)


def has_flags(value: Any) -> bool:
    if isinstance(value, FlagText):
        return True
    if isinstance(value, dict):
        return any(has_flags(v) for v in value.values())
    if isinstance(value, list):
        return any(has_flags(v) for v in value)
    return False


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple[Any, ...]:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(_unwrap(a) for a in typing.get_args(annotation))
    return (annotation,)


def takes_text(annotation: Any) -> bool:
    """Whether a field of this type takes a value as text."""
    for member in _members(annotation):
        if typing.get_origin(member) is typing.Literal:
            if any(isinstance(a, str) for a in typing.get_args(member)):
                return True
        elif isinstance(member, type) and issubclass(member, str | PurePath | enum.Enum):
            return True
    return False


def _model(annotation: Any) -> type[BaseModel] | None:
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _sequence_item(annotation: Any, index: int = 0) -> Any | None:
    """The item type of a list/set/tuple field (the ``index``-th of a fixed tuple), None if none."""
    for member in _members(annotation):
        origin = typing.get_origin(member)
        if origin in (list, set, frozenset, tuple):
            args = [a for a in typing.get_args(member) if a is not Ellipsis]
            if not args:
                return Any
            return args[index] if origin is tuple and len(args) > 1 and index < len(args) else args[0]
        if member in (list, set, frozenset, tuple):
            return Any
    return None


def _takes_bool(annotation: Any) -> bool:
    return any(m is bool or m is Any for m in _members(annotation))


def typed(value: Any, annotation: Any = Any) -> Any:
    """``value`` with its :class:`FlagText` parts typed for a field of ``annotation``."""
    if type(value) is _Bare:
        if not _takes_bool(annotation):
            raise ValueError("a flag with no value sets only a true/false knob: give this one its value")
        return True
    if type(value) is FlagText:
        if takes_text(annotation):
            return str(value)
        parsed = json_or_text(value)
        item = _sequence_item(annotation)
        if item is not None and not isinstance(parsed, list):
            return [typed(value, item)]  # one word for a list knob is a list of one, as the original's
        return parsed
    if isinstance(value, dict):
        model = _model(annotation)
        if model is not None:
            # a config class types its own fields when it is validated (it, or the plugin class
            # it is narrowed to); another model's fields are typed here
            if getattr(model, "FLAGS_LATER", None) is not None or not has_flags(value):  # a BaseConfig
                return value
            return typed_fields(model, value)
        args = typing.get_args(_unwrap(annotation))
        item = args[1] if typing.get_origin(_unwrap(annotation)) is dict and len(args) == 2 else Any
        return {k: typed(v, item) for k, v in value.items()} if has_flags(value) else value
    if isinstance(value, list):
        if not has_flags(value):
            return value
        return [typed(v, _sequence_item(annotation, i) or Any) for i, v in enumerate(value)]
    return value


def typed_fields(model: type[BaseModel], data: dict[str, Any], *, later: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``data`` for ``model`` with each field's command-line values typed (fields in ``later`` are
    left for a config validated after this one, such as the eval config's ``env`` table)."""
    fields = model.model_fields
    out = dict(data)
    for key, value in data.items():
        if key in later or not has_flags(value):
            continue
        field = fields.get(key)
        if field is None:  # an alias, or a key the model refuses (pydantic says which)
            field = next((f for f in fields.values() if f.validation_alias is not None and key in _alias_names(f.validation_alias)), None)
        out[key] = typed(value, field.annotation if field is not None else Any)
    return out


def _alias_names(alias: Any) -> set[str]:
    choices = getattr(alias, "choices", None)
    return {str(c) for c in choices} if choices is not None else {str(alias)}


_MISSING = object()


def _child(resolved: Any, key: str) -> Any:
    if isinstance(resolved, BaseModel):
        if key in type(resolved).model_fields:
            return getattr(resolved, key)
        extra = resolved.model_extra or {}
        return extra.get(key, _MISSING)
    if isinstance(resolved, dict):
        return resolved.get(key, _MISSING)
    return _MISSING


def resolved_like(raw: Any, resolved: Any) -> Any:
    """``raw`` (a table as given) with each command-line value replaced by what the validated
    config ``resolved`` made of it (JSON-ready), so a saved table reads back as it ran."""
    from pydantic_core import to_jsonable_python

    if isinstance(raw, FlagText):
        return to_jsonable_python(resolved) if resolved is not _MISSING else typed(raw)
    if isinstance(raw, dict):
        if not has_flags(raw):
            return raw
        out = {}
        for key, value in raw.items():
            sub = _child(resolved, key) if resolved is not _MISSING else _MISSING
            out[key] = resolved_like(value, sub) if sub is not _MISSING else typed(value)
        return out
    if isinstance(raw, list) and has_flags(raw):
        if isinstance(resolved, list | tuple) and len(resolved) == len(raw):
            return [resolved_like(a, b) for a, b in zip(raw, resolved, strict=True)]
        return typed(raw)
    return raw

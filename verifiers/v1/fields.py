"""Pieces shared by the v1 pydantic models, each keeping ``import verifiers.v1`` plus defining a
taskset cheap (``benchmarks/import_time.py --cases v1``; tests/v1/test_import.py)."""

from __future__ import annotations

import os
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler

ModelT = TypeVar("ModelT", bound=type[BaseModel])

ON_FIRST_USE = ConfigDict(defer_build=True)
"""The config of a record the run path makes but defining a taskset does not: its validator and
serializer are built on first use, not at import (``import verifiers.v1`` plus a taskset stays
cheap; tests/v1/test_import.py)."""


def new_list() -> list[Any]:
    """A fresh empty list: ``Field(default_factory=new_list)`` in place of ``default_factory=list``.
    Pydantic reads a default factory's signature when it defines a model, and a builtin's comes
    from parsing its text signature (a tokenizer regex compiled on first use, then a tokenize per
    field: a few ms of ``import verifiers.v1`` plus a taskset); a Python function's is read free."""
    return []


def new_id() -> str:
    """A fresh random id, as ``uuid.uuid4().hex`` writes it (122 random bits, the version and
    variant bits set): the bytes are marked in place instead of through ``uuid.UUID``'s checks
    (every rollout mints a few: its trace, its episode, its runtime's folder)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


def put_field(model: BaseModel, name: str, value: Any) -> None:
    """``model.name = value`` for a plain field of one of our own models on the rollout path (no
    validator on assignment, no ``exclude_unset`` dump of it): written to the instance dict,
    without pydantic's ``__setattr__`` (a cost per write; the field is not marked as set)."""
    model.__dict__[name] = value


def base_built_on_first_use(cls: ModelT) -> ModelT:
    """For a base model that defining a taskset subclasses but does not validate itself
    (``TaskData``, ``State``, ``BaseConfig``): the class is defined with ``defer_build=True``, so
    its own validator is built on first use, and this drops the setting from its config, so that
    the deferral is not inherited: a subclass is built when it is defined, as any model (a field
    pydantic cannot handle fails there)."""
    del cls.model_config["defer_build"]
    return cls


class _SerializedAsAny:
    """A field annotation, ``Annotated[TaskConfig, AS_ANY]``: the value serializes as its own class
    (a subclass's fields included), as pydantic's ``SerializeAsAny[TaskConfig]`` does; that one
    lives in ``pydantic.functional_serializers``, whose import costs about as much as two of our
    config classes."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        from pydantic_core import core_schema

        schema = handler(source)
        target = schema
        while target["type"] == "definitions":
            target = target["schema"]
        target["serialization"] = core_schema.simple_ser_schema("any")
        return schema


AS_ANY = _SerializedAsAny()

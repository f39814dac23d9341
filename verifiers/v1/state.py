"""Per-rollout mutable state shared by a task's hooks, its tools and the harness (never serialized)."""

# Field annotations here are objects, not strings (no ``from __future__ import annotations``):
# pydantic would compile and evaluate each one when it defines the model, a cost every
# ``import verifiers.v1`` plus a taskset pays (benchmarks/import_time.py --cases v1).

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from verifiers.v1.fields import base_built_on_first_use


@base_built_on_first_use
class State(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants", defer_build=True)

    artifacts: dict[str, bytes | None] = Field(default_factory=dict)


StateT = TypeVar("StateT", bound=State, default=State)

"""The data model's configs: task knobs, taskset knobs and task selection.

Every config refuses unknown keys (a typo in a TOML file is an error, not a silently ignored
setting). Sub-plugin configs are narrowed by id (``verifiers.v1.plugins``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from verifiers.v1.plugins import narrow_field, registered_ids
from verifiers.v1.types import ID


class BaseConfig(BaseModel):
    """A config: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


class DecoratedFunctionConfig(BaseConfig):
    """A function plugged from config in place of (or beside) a decorated task method."""

    fn: str | None = None
    """``pkg.module:function``, ``pkg.module.function`` or ``path/file.py:function``; unset keeps
    the task's decorated method of the entry's name and overrides only its metadata."""
    priority: int | None = None


class RewardFunctionConfig(DecoratedFunctionConfig):
    weight: FiniteFloat | None = None


class JudgeConfig(BaseConfig):
    """A judge plugged into a task's scoring, narrowed by ``id`` (the judges themselves come with
    the judge layer; until then a plugged judge is refused when scoring starts)."""

    model_config = ConfigDict(extra="allow")

    id: ID
    weight: FiniteFloat = 1.0


class TaskConfig(BaseConfig):
    """Run-time knobs that task behaviour reads (``[env.taskset.task]``). Every field of a
    subclass needs a default: a task built without a config builds its declared config type."""

    judges: list[SerializeAsAny[JudgeConfig]] = Field(default_factory=list)
    stops: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    metrics: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    rewards: dict[str, RewardFunctionConfig] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _narrow_judges(cls, data: Any) -> Any:
        # a judge table becomes its judge's config class when that judge is registered
        if isinstance(data, dict) and isinstance(data.get("judges"), list):
            holder = dict(enumerate(data["judges"]))
            for i in holder:
                if isinstance(holder[i], dict) and holder[i].get("id") in registered_ids("judge"):
                    narrow_field(holder, i, "judge")
            data = {**data, "judges": list(holder.values())}
        return data


class SharedTasksetConfig(BaseConfig):
    """The knobs every taskset has, whatever its id."""

    task: SerializeAsAny[TaskConfig] = TaskConfig()
    system_prompt: Path | None = None
    """A file whose text replaces every task's ``system_prompt`` when iterating."""


class TasksetConfig(SharedTasksetConfig):
    """``[env.taskset]``: the taskset package's id and its knobs (a subclass adds them)."""

    id: ID = ""

    @property
    def name(self) -> str:
        return self.id


_IDX = re.compile(r"(\d*):(\d*)(?::(\d*))?")


def _idx_item(item: int | str) -> int | str:
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise ValueError(f"idx {item!r} is not an int or a 'start:stop:step' slice")
    if isinstance(item, int):
        if item < 0:
            raise ValueError(f"idx {item} is negative")
        return item
    text = item.strip()
    if text.isdigit():
        return int(text)
    m = _IDX.fullmatch(text)
    if m is None:
        raise ValueError(f"idx {item!r} is not an int or a 'start:stop:step' slice")
    start, stop, step = m.groups()
    if step and int(step) == 0:
        raise ValueError(f"idx slice {item!r} has step 0")
    if stop and int(start or 0) >= int(stop):
        raise ValueError(f"idx range {item!r} is empty")
    return text


class TaskMatchConfig(BaseConfig):
    """Tasks named by position (``idx``: ints or ``start:stop:step`` slices, also comma-separated)
    or by identity (``ids``, ``keys``, ``names``); a task matches when any list names it."""

    idx: list[int | str] = Field(default_factory=list)
    ids: list[str] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)

    @field_validator("idx", mode="before")
    @classmethod
    def _parse_idx(cls, value: Any) -> Any:
        if isinstance(value, int | str):
            value = [value]
        if not isinstance(value, list | tuple):
            return value
        out: list[int | str] = []
        for item in value:
            for part in item.split(",") if isinstance(item, str) else [item]:
                out.append(_idx_item(part))
        return out

    @property
    def empty(self) -> bool:
        return not (self.idx or self.ids or self.keys or self.names)

    def idx_ranges(self) -> list[range]:
        ranges = []
        for item in self.idx:
            if isinstance(item, int):
                ranges.append(range(item, item + 1))
            else:
                start, stop, step = [*item.split(":"), ""][:3]
                ranges.append(range(int(start or 0), int(stop or sys.maxsize), int(step or 1)))
        return ranges

    @property
    def idx_tail(self) -> bool:
        """Whether a slice names every position from some start on."""
        return any(r.stop == sys.maxsize and r.step == 1 for r in self.idx_ranges())

    @property
    def idx_stop(self) -> int | None:
        """One past the last position this can match; None when a match could lie anywhere."""
        ranges = self.idx_ranges()
        if not ranges or self.ids or self.keys or self.names:
            return None
        stop = max(r.stop for r in ranges)
        return None if stop == sys.maxsize else stop


class SelectConfig(BaseConfig):
    """Which tasks a run uses, applied in this order: include, exclude, shuffle, skip, limit."""

    include: TaskMatchConfig = TaskMatchConfig()
    exclude: TaskMatchConfig = TaskMatchConfig()
    shuffle: bool = False
    seed: int = 0
    skip: int = Field(0, ge=0)
    limit: int | None = Field(None, ge=1)


class SelectCLIConfig(SelectConfig):
    """``SelectConfig`` with the command line's short keys ``n`` (limit) and ``s`` (shuffle)."""

    shuffle: bool = Field(False, validation_alias=AliasChoices("shuffle", "s"))
    limit: int | None = Field(None, ge=1, validation_alias=AliasChoices("limit", "n"))


class WireAgentConfig(BaseModel):
    """An agent's config as a trace records it, read without resolving any plugin: the agent
    that produced the trace (harness, runtime, model, limits). Unknown keys are kept. The full
    ``AgentConfig`` (a role of an env) comes with the env layer and dumps to this shape."""

    model_config = ConfigDict(extra="allow")

    harness: dict[str, Any] | None = None
    runtime: dict[str, Any] = Field(default_factory=lambda: {"type": "subprocess"})
    """The embedded default is the local subprocess runtime (0.4.0's is a hosted sandbox)."""
    model: str | None = None
    client: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    timeout: dict[str, Any] = Field(default_factory=dict)
    retries: dict[str, Any] = Field(default_factory=dict)
    network_notice: bool = True

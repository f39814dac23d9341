"""The data model's configs: task knobs, taskset knobs and task selection.

Every config refuses unknown keys (a typo in a TOML file is an error, not a silently ignored
setting). Sub-plugin configs are narrowed by id (``verifiers.v1.plugins``).
"""

# Field annotations here are objects, not strings (no ``from __future__ import annotations``):
# pydantic would compile and evaluate each one when it defines the model, a cost every
# ``import verifiers.v1`` plus a taskset pays (benchmarks/import_time.py --cases v1).

import re
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    field_validator,
    model_validator,
)

from verifiers.v1.fields import AS_ANY, base_built_on_first_use, new_list
from verifiers.v1.plugins import (
    ID,
    PluginError,
    concrete_type,
    import_plugin,
    narrow_field,
    register_resolver,
)


@base_built_on_first_use
class BaseConfig(BaseModel):
    """A config: unknown keys are refused. A table given for a field whose default is a config
    with values of its own (``user = AgentConfig(max_turns=8)``) is laid over that default, as the
    original's configs are: ``[env.user.runtime]`` keeps the user's ``max_turns``. A table naming
    another plugin (``id``, a runtime's ``type``) than the default's replaces it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    FLAGS_LATER: ClassVar[frozenset[str]] = frozenset()
    """Fields whose command-line values a config validated later types (``configs.flags``)."""

    @model_validator(mode="before")
    @classmethod
    def _over_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # command-line text, typed by the field it lands in (only a command line loads the flags
        # module: without it there is no such text to type)
        flags = sys.modules.get("verifiers.v1.configs.flags")
        if flags is not None and flags.has_flags(data):
            data = flags.typed_fields(cls, data, later=cls.FLAGS_LATER)
        out = None
        for name, default in _set_defaults(cls):
            value = data.get(name)
            if isinstance(value, dict):
                out = out if out is not None else dict(data)
                out[name] = _laid_over(default, value)
        return out if out is not None else data


_SET_DEFAULTS: dict[type, list[tuple[str, dict[str, Any]]]] = {}


def _set_defaults(cls: type[BaseModel]) -> list[tuple[str, dict[str, Any]]]:
    """``cls``'s fields whose default is a model with values set, and those values (once per class)."""
    found = _SET_DEFAULTS.get(cls)
    if found is None:
        found = [
            (name, field.default.model_dump(exclude_unset=True))
            for name, field in cls.model_fields.items()
            if isinstance(field.default, BaseModel) and field.default.model_fields_set
        ]  # fmt: skip
        _SET_DEFAULTS[cls] = found
    return found


def _laid_over(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    if any(k in top and k in base and top[k] != base[k] for k in ("id", "type")):
        return top  # another plugin (harness id, runtime type): the default's knobs are not its knobs
    out = dict(base)
    for k, v in top.items():
        out[k] = _laid_over(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class SamplingConfig(BaseModel):
    """Sampling knobs; provider-specific keys pass through. ``max_completion_tokens`` and an
    ``extra_body`` layer fold into one key per parameter."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = Field(None, validation_alias=AliasChoices("max_tokens", "max_completion_tokens"))

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "extra_body" not in data and "max_completion_tokens" not in data:
            return data  # nothing to fold (every model call validates its sampling: the common case)
        folded: dict[str, Any] = {}
        for layer in (data.get("extra_body") or {}, data):
            layer = {k: v for k, v in layer.items() if k != "extra_body"}
            if "max_completion_tokens" in layer:
                layer.setdefault("max_tokens", layer.pop("max_completion_tokens"))
            folded.update(layer)
        return folded


Sampling = SamplingConfig


class DecoratedFunctionConfig(BaseConfig):
    """A function plugged from config in place of (or beside) a decorated task method."""

    fn: str | None = None
    """``pkg.module:function``, ``pkg.module.function`` or ``path/file.py:function``; unset keeps
    the task's decorated method of the entry's name and overrides only its metadata."""
    priority: int | None = None


class RewardFunctionConfig(DecoratedFunctionConfig):
    weight: FiniteFloat | None = None


class JudgeConfig(BaseConfig):
    """A judge: its plugin ``id`` (empty for a judge task code calls itself), its reward key and
    weight, and the model endpoint it asks (a client config).

    The endpoint defaults to the run's: with no ``base_url`` the judge calls the run's own model
    client, with no ``model`` the run's model. Nothing here points at a hosted service."""

    id: ID = ""
    """The judge plugin (``reference``, ``rubric``, ``decision`` or an installed package)."""
    name: str = ""
    """The reward key (default: ``id``)."""
    weight: FiniteFloat = 1.0
    model: str | None = None
    """None: the run's model."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint (ends in ``/v1``); None: the run's model client."""
    api_key_var: str | None = None
    """The environment variable holding the endpoint's key (the key itself never sits in a config)."""
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Header name -> environment variable, read when the judge calls."""
    timeout: float | None = Field(None, gt=0)
    """Seconds one judge call may take (None: the scoring stage's limit bounds it). The
    original's table form (``connect`` / ``read`` / ``write`` / ``pool``) is accepted: the
    call is bounded by the sum of its values."""
    sampling: SamplingConfig = SamplingConfig()
    prompt: Path | None = None
    """A file whose text replaces the judge's prompt template."""

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout_table(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = set(value) - {"connect", "read", "write", "pool"}
            if unknown:
                raise ValueError(f"timeout: unknown keys {sorted(unknown)} (connect, read, write, pool)")
            parts = [v for v in value.values() if v is not None]
            return float(sum(parts)) if parts else None
        return value

    @property
    def key(self) -> str:
        """The reward key this judge records."""
        return self.name or self.id


Judges = list[Annotated[JudgeConfig, AS_ANY]]
"""A task's plugged judges, each validated into its judge's own config class."""


def judge_config_type(judge_id: str) -> type[JudgeConfig]:
    """The config class of the judge plugin ``judge_id``: the ``JudgeConfig`` its ``Judge``
    subclass declares (``Judge[float, MyConfig]``), else one its module exports, else
    ``JudgeConfig``. A missing package is one ``ModuleNotFoundError``."""
    module = import_plugin(judge_id, "judge")
    exported = [getattr(module, n, None) for n in getattr(module, "__all__", None) or ()]
    types = [c for c in exported if isinstance(c, type)]
    for cls in types:
        declared = concrete_type(cls, JudgeConfig)
        if declared is not None and not issubclass(cls, BaseModel):
            return declared
    configs = [c for c in types if issubclass(c, JudgeConfig) and c is not JudgeConfig]
    return configs[0] if len(configs) == 1 else JudgeConfig


register_resolver("judge", judge_config_type)  # type: ignore[arg-type]


def resolve_judges(entries: Any) -> list[Any]:
    """Each ``judges`` entry (a table or a config) validated into its judge's config class."""
    if not isinstance(entries, list | tuple):
        return entries
    out = []
    for i, entry in enumerate(entries):
        if isinstance(entry, JudgeConfig) and type(entry) is not JudgeConfig:
            out.append(entry)
            continue
        raw = entry.model_dump(exclude_unset=True) | {"id": entry.id} if isinstance(entry, JudgeConfig) else entry
        if not isinstance(raw, dict):
            raise ValueError(f"judges[{i}] must be a table with an 'id', not {type(raw).__name__}")
        if not raw.get("id"):
            raise ValueError(
                f"judges[{i}] needs an id (a judge plugin: reference, rubric, decision, or an installed package)"
            )
        holder = {i: dict(raw)}
        try:
            narrow_field(holder, i, "judge")
        except ModuleNotFoundError as exc:
            raise PluginError(f"judges[{i}]: {exc}") from None
        out.append(holder[i])
    return out


class TaskConfig(BaseConfig):
    """Run-time knobs that task behaviour reads (``[env.taskset.task]``). Every field of a
    subclass needs a default: a task built without a config builds its declared config type."""

    judges: Judges = Field(default_factory=new_list)
    """Judges run after the task's own rewards (``[[env.taskset.task.judges]]``), each recording
    the reward ``name or id``."""
    stops: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    metrics: dict[str, DecoratedFunctionConfig] = Field(default_factory=dict)
    rewards: dict[str, RewardFunctionConfig] = Field(default_factory=dict)

    @field_validator("judges", mode="before")
    @classmethod
    def _narrow_judges(cls, value: Any) -> Any:
        return resolve_judges(value)

    @model_validator(mode="after")
    def _distinct_judges(self) -> "TaskConfig":
        if len(self.judges) < 2:
            return self  # nothing to compare (every task built without a config makes one of these)
        keys = [j.key for j in self.judges]
        if dupes := sorted({k for k in keys if keys.count(k) > 1}):
            raise ValueError(f"judges share the reward key {dupes}; give each a distinct name")
        return self


@base_built_on_first_use
class SharedTasksetConfig(BaseConfig):
    """The knobs every taskset has, whatever its id."""

    model_config = ConfigDict(defer_build=True)

    task: Annotated[TaskConfig, AS_ANY] = TaskConfig()
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

    idx: list[int | str] = Field(default_factory=new_list)
    ids: list[str] = Field(default_factory=new_list)
    keys: list[str] = Field(default_factory=new_list)
    names: list[str] = Field(default_factory=new_list)

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


def __getattr__(name: str) -> Any:
    # a trace's record of an agent config: defined on first use, not when a taskset is
    if name == "WireAgentConfig":
        from verifiers.v1.configs.wire import WireAgentConfig

        return WireAgentConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

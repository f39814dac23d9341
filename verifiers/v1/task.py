"""A task: its data (``TaskData``, a frozen row that travels on the trace) and its behaviour (``Task``).

``Task[Data, State, Config]`` declares its data, state and config classes as type arguments;
its decorated methods (``@vf.reward``, ``@vf.metric``, ``@vf.stop``) are collected per class,
and functions plugged from config (``[env.taskset.task.rewards.NAME]``) join or replace them.
"""

# Field annotations here are objects, not strings (no ``from __future__ import annotations``):
# pydantic would compile and evaluate each one when it defines the model, a cost every
# ``import verifiers.v1`` plus a taskset pays (benchmarks/import_time.py --cases v1).

import copy
import hashlib
import importlib
import importlib.util
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from verifiers.v1.configs import DecoratedFunctionConfig, RewardFunctionConfig, TaskConfig
from verifiers.v1.decorators import discover_decorated
from verifiers.v1.fields import base_built_on_first_use, new_list
from verifiers.v1.messages import Messages, content_text
from verifiers.v1.plugins import concrete_type
from verifiers.v1.state import State, StateT

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

MAX_ARTIFACT_BYTES = 32 * 1024 * 1024


_KEY_ENCODER = json.JSONEncoder(sort_keys=True, default=str)
"""``json.dumps(data, sort_keys=True, default=str)``'s encoder, made once (it keeps no state
between calls; ``dumps`` would build one per call)."""


def task_key(data: Mapping[str, Any]) -> str:
    """The content hash of a task's dumped data, independent of key order."""
    return hashlib.sha256(_KEY_ENCODER.encode(data).encode()).hexdigest()


class TaskResources(BaseModel):
    model_config = ConfigDict(frozen=True)

    cpu: float | None = None
    memory: float | None = None
    """GB."""
    gpu: str | None = None
    """``"A100"`` or ``"A100:2"``."""
    disk: float | None = None
    """GB."""


class TaskTimeout(BaseModel):
    """Per-task limits in seconds; unset: the agent config's, else none."""

    model_config = ConfigDict(frozen=True)

    setup: float | None = None
    agent: float | None = None
    finalize: float | None = None
    scoring: float | None = None


class Artifact(BaseModel):
    """A path collected from one runtime and restored at the same place in another."""

    source: str
    exclude: list[str] = Field(default_factory=new_list)
    required: bool = True


SkillSource = Path | dict[str, str]


@base_built_on_first_use
class TaskData(BaseModel):
    """One task's data. Subclass it to add fields (``answer``, ``tests`` ...)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    idx: int | None = None
    """Position in the taskset's ``load()`` stream; set when iterating."""
    id: str | None = None
    name: str | None = None
    description: str | None = None
    prompt: str | Messages | None = None
    system_prompt: str | None = None
    image: str | None = None
    workdir: str | None = None
    agent_user: str | None = None
    skills: list[SkillSource] = Field(default_factory=new_list)
    network_allow: list[str] = Field(default_factory=lambda: ["*"])
    network_block: list[str] = Field(default_factory=new_list)
    artifacts: list[Artifact] = Field(default_factory=new_list)
    artifact_max_bytes: int = Field(MAX_ARTIFACT_BYTES, gt=0)
    timeout: TaskTimeout = TaskTimeout()
    resources: TaskResources = TaskResources()

    @property
    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n\n".join(t for m in self.prompt or [] if (t := content_text(m.content)))


class WireTaskData(TaskData):
    """Task data read without the task's class: unknown fields are kept (``model_extra``)."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)  # a record's: built on first use


DataT = TypeVar("DataT", bound=TaskData, default=TaskData)
ConfigT = TypeVar("ConfigT", bound=TaskConfig, default=TaskConfig)


class Task(Generic[DataT, StateT, ConfigT]):
    """Behaviour of one task: setup, validation, scoring hooks and per-rollout toolsets."""

    NEEDS_CONTAINER: ClassVar[bool] = False
    scoring_deferred: bool = False

    def __init__(self, data: DataT, config: ConfigT | None = None) -> None:
        if not isinstance(data, TaskData):
            raise TypeError(f"{type(self).__name__} takes a TaskData, not {type(data).__name__}")
        self.data = data
        self.config = config if config is not None else self.config_type()()

    @property
    def hash(self) -> str:
        """The content hash of the task's data (``trace.task.hash``). Hashed once per data object
        (the data is a frozen row; each rollout of the task reads the hash), again when
        ``self.data`` is replaced."""
        data = self.data
        cached = self.__dict__.get("_vf_hash_of")
        if cached is not None and cached[0] is data:
            return cached[1]
        digest = task_key(data.model_dump(mode="json", exclude_none=True))
        self.__dict__["_vf_hash_of"] = (data, digest)
        return digest

    @property
    def key(self) -> str:
        """The task's stable identity (``trace.task.key``): the hash unless overridden (e.g. by a
        dataset's own instance id). Keys are unique within a taskset."""
        return self.hash

    def with_data(self, **update: Any) -> Self:
        cls = type(self)
        if _copies_plainly(cls):  # what copy.copy would do, without its protocol lookups (per loaded task)
            clone = cls.__new__(cls)
            clone.__dict__.update(self.__dict__)
        else:
            clone = copy.copy(self)
        clone.data = self.data.model_copy(update=update)
        return clone

    def with_system_prompt(self, system_prompt: str) -> Self:
        return self.with_data(system_prompt=system_prompt)

    def runtime_env(self) -> dict[str, str]:
        """Environment variables for the rollout's processes (not recorded on the trace)."""
        return {}

    async def setup(self, trace: "Trace", runtime: Any) -> None:
        return None

    async def finalize(self, trace: "Trace", runtime: Any) -> None:
        return None

    async def stage_verifier(self, trace: "Trace", runtime: Any) -> None:
        return None

    async def validate(self, runtime: Any) -> bool | None:
        """Check the ground truth without a model; None when there is no such check."""
        return None

    def defer_scoring(self) -> Self:
        """A copy whose metrics and rewards are skipped (another agent scores it)."""
        clone = copy.deepcopy(self)
        clone.scoring_deferred = True
        return clone

    async def score(self, trace: "Trace", runtime: Any = None) -> None:
        """Run the metrics and rewards on ``trace`` (see ``verifiers.v1.scoring.score_task``)."""
        if self.scoring_deferred:
            return
        from verifiers.v1.scoring import score_task

        await score_task(self, trace, runtime)

    @classmethod
    def data_type(cls) -> type[TaskData]:
        return concrete_type(cls, TaskData) or TaskData

    @classmethod
    def config_type(cls) -> type[TaskConfig]:
        return concrete_type(cls, TaskConfig) or TaskConfig

    @classmethod
    def state_type(cls) -> type:
        return concrete_type(cls, State) or State

    def plugged_judges(self) -> list[Any]:
        """The judges ``config.judges`` names, built (``verifiers.v1.judge.load_judge``)."""
        return [self.plugged_judge(config) for config in self.config.judges]

    def plugged_judge(self, config: Any) -> Any:
        from verifiers.v1.judge import load_judge

        return load_judge(config)

    def hooks(self, attr: str) -> list[Callable[..., Any]]:
        """The ``@vf.<kind>`` methods merged with the functions plugged from config: a plugged
        entry replaces the method of its name (an entry without ``fn`` only changes its
        priority or weight). Highest priority first, then by name."""
        kind = attr
        # intercepts are not pluggable from config (0.4.0 has no such table)
        table = _PLUGGABLE.get(kind)
        plugged: dict[str, DecoratedFunctionConfig] = getattr(self.config, table) if table is not None else {}
        decorated = discover_decorated(self, kind)
        if not plugged and (len(decorated) < 2 or len({fn.__name__ for fn in decorated}) == len(decorated)):
            return decorated  # the common case: the class's own hooks, already in this order
        merged = {fn.__name__: fn for fn in decorated}
        for name, spec in plugged.items():
            merged[name] = _plugged(name, spec, kind, merged.get(name))
        return sorted(merged.values(), key=lambda fn: (-getattr(fn, f"{kind}_priority", 0), fn.__name__))

    @classmethod
    def toolsets(cls, config: ConfigT) -> list[Any]:
        """Tool servers started for each rollout of this task type (``vf.Toolset`` instances, one
        MCP server each, closed when the rollout ends; a plain object's ``@vf.tool`` methods run
        in this process instead)."""
        return []


_PLAIN_COPY: dict[type, bool] = {}


def _copies_plainly(cls: type) -> bool:
    """Whether ``copy.copy`` of a ``cls`` instance is a new instance with the same ``__dict__``
    entries: no ``__copy__``, reduce, getstate/setstate or slots of its own, no copyreg entry.
    A class's methods do not change after it is made: answered once per class."""
    plain = _PLAIN_COPY.get(cls)
    if plain is None:
        import copyreg

        plain = (
            getattr(cls, "__copy__", None) is None
            and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and cls.__getstate__ is object.__getstate__
            and getattr(cls, "__setstate__", None) is None
            and not any(getattr(k, "__slots__", ()) for k in cls.__mro__)
            and cls not in copyreg.dispatch_table
        )
        _PLAIN_COPY[cls] = plain
    return plain


_PLUGGABLE = {"stop": "stops", "metric": "metrics", "reward": "rewards"}
"""The hook kinds a task config can plug functions into, and the config's table of each."""


def _plugged(name: str, spec: DecoratedFunctionConfig, kind: str, decorated: Callable[..., Any] | None) -> Callable[..., Any]:
    if spec.fn is None:
        if decorated is None:
            raise ValueError(f"{kind}s.{name} has no fn and the task has no @vf.{kind} method {name!r} to adjust")
        target = decorated
    else:
        target = import_function(spec.fn)

    def plugged(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    # the wrapper carries the target's signature (for injection) and this entry's metadata
    plugged.__signature__ = _signature(target)  # type: ignore[attr-defined]
    plugged.__name__ = name
    setattr(plugged, kind, True)
    prio = spec.priority if spec.priority is not None else getattr(decorated, f"{kind}_priority", 0)
    setattr(plugged, f"{kind}_priority", prio)
    if kind == "reward":
        weight = spec.weight if isinstance(spec, RewardFunctionConfig) and spec.weight is not None else None
        plugged.reward_weight = weight if weight is not None else getattr(decorated, "reward_weight", 1.0)  # type: ignore[attr-defined]
    if _is_async(target):
        async def plugged_async(*args: Any, **kwargs: Any) -> Any:
            return await target(*args, **kwargs)

        plugged_async.__dict__.update(plugged.__dict__)
        plugged_async.__name__ = name
        return plugged_async
    return plugged


def _signature(fn: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(fn)


def _is_async(fn: Callable[..., Any]) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def import_function(path: str) -> Callable[..., Any]:
    """``pkg.module:function``, ``pkg.module.function`` or ``path/file.py:function``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"fn {path!r} is not 'module:function', 'module.function' or 'file.py:function'")
    if module_name.endswith(".py"):
        file = Path(module_name)
        if not file.is_file():
            raise ValueError(f"fn {path!r}: no file {module_name!r}")
        spec = importlib.util.spec_from_file_location(f"_vf_plugged_{file.stem}", file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"fn {path!r} is not a function (got {fn!r})")
    return fn


TaskT = TypeVar("TaskT", bound=Task, default=Task)

"""Loading v1 packages by id: ``vf.load_taskset(TasksetConfig)`` (an env config: ``verifiers.v1.env``).

A v1 environment is a plain package whose ``__init__.py`` lists in ``__all__`` exactly one
``Taskset`` subclass (and optionally one Env and one Harness subclass). Ids map to modules as
``verifiers.v1.plugins`` says. The classic loader (``verifiers.utils.env_loading``) can tell a
v1 package from a classic one with :func:`v1_taskset_class` without importing anything else.
"""

from __future__ import annotations

from types import ModuleType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from verifiers.v1.configs import BaseConfig, SamplingConfig, SharedTasksetConfig, TaskConfig, TasksetConfig
from verifiers.v1.configs.interception import ElasticInterceptionPoolConfig, InterceptionConfig
from verifiers.v1.configs.retries import RetryConfig
from verifiers.v1.fields import AS_ANY
from verifiers.v1.plugins import (
    PluginError,
    import_plugin,
    narrow_field,
    plugin_class,
    register_resolver,
    validation_message,
)
from verifiers.v1.task import Task
from verifiers.v1.taskset import Taskset


def import_taskset(taskset_id: str) -> ModuleType:
    return import_plugin(taskset_id, "taskset")


def taskset_class(taskset_id: str) -> type[Taskset]:
    if not taskset_id:
        raise PluginError("taskset.id is empty: name the taskset package (e.g. [env.taskset] id = \"my-taskset\")")
    return plugin_class(import_taskset(taskset_id), Taskset, "taskset")


def taskset_config_type(taskset_id: str) -> type[TasksetConfig]:
    """The config class the taskset declares (``Taskset[MyTask, MyConfig]``), else ``TasksetConfig``."""
    return taskset_class(taskset_id).config_type()


def task_type(taskset_id: str) -> type[Task]:
    """The taskset's task class, from its type arguments (nothing is loaded)."""
    return taskset_class(taskset_id).task_type()


def _narrowed_config(cls: type[Taskset], data: dict[str, Any]) -> TasksetConfig:
    config_cls = cls.config_type()
    data = dict(data)
    # a `task` table becomes the config class the task declares (Task[..., MyTaskConfig]) when the
    # taskset's config leaves the field at a less specific class: what the task's author expects
    task_cfg = cls.task_type().config_type()
    declared = config_cls.model_fields["task"].annotation
    # (with no `task` table at all, the task's own config class with its defaults: a hook reading
    # `self.config.bonus` must not meet a plain TaskConfig)
    if task_cfg is not TaskConfig and not _is_subclass(declared, task_cfg):
        given = data.get("task")
        if given is None:
            given = {}
        elif isinstance(given, TaskConfig) and not isinstance(given, task_cfg):
            given = given.model_dump(exclude_unset=True)
        if isinstance(given, dict):
            try:
                data["task"] = task_cfg.model_validate(given)
            except ValidationError as exc:
                raise PluginError(validation_message(exc, "task")) from None
    return config_cls.model_validate(data)


def _is_subclass(annotation: Any, cls: type) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, cls)


class _Validating:
    """A stand-in config class for ``narrow_field``: validates into the taskset's own config class."""

    def __init__(self, taskset_cls: type[Taskset]) -> None:
        self.taskset_cls = taskset_cls

    def model_validate(self, data: dict[str, Any]) -> TasksetConfig:
        return _narrowed_config(self.taskset_cls, data)


register_resolver("taskset", lambda taskset_id: _Validating(taskset_class(taskset_id)))  # type: ignore[arg-type, return-value]


def load_taskset(config: TasksetConfig | dict[str, Any] | str) -> Taskset:
    """The taskset ``config`` names, built with its config narrowed to the taskset's own class
    (a plain ``TasksetConfig(id=...)`` or a dict with the taskset's knobs both work)."""
    if isinstance(config, str):
        config = {"id": config}
    if isinstance(config, TasksetConfig):
        cls = taskset_class(config.id)
        if not isinstance(config, cls.config_type()):
            config = config.model_dump(exclude_unset=True) | {"id": config.id}
    if isinstance(config, dict):
        cls = taskset_class(str(config.get("id") or ""))
        try:
            config = _narrowed_config(cls, config)
        except ValidationError as exc:
            raise PluginError(f"taskset {cls.__name__} config: {validation_message(exc)}") from None
        except PluginError as exc:
            raise PluginError(f"taskset {cls.__name__} config: {exc}") from None
    return cls(config)


class EnvTimeoutConfig(BaseConfig):
    """``[env.timeout]``: seconds the env's own hooks may take per episode (None: no bound).
    ``episode`` bounds ``setup`` plus ``run`` (the agents they play included), ``finalize`` the
    env's ``finalize``; each agent run's own stages are bounded by ``[env.<role>.timeout]``. Past
    either, the episode ends with a ``TimeoutError`` and ``is_timeout`` (the traces finished by
    then are kept and scored)."""

    episode: float | None = Field(None, gt=0)
    finalize: float | None = Field(None, gt=0)


class SharedEnvConfig(BaseConfig):
    """The knobs every env has, whatever its id and its roles: what the envs of one run may share
    (the original's ``SharedEnvConfig``; fill an env's own block with them by ``merge_defaults``).
    ``EnvConfig`` adds the env's id, its taskset's id and, in an env's own subclass, its roles."""

    taskset: Annotated[SharedTasksetConfig, AS_ANY] = SharedTasksetConfig()
    max_concurrent_agents: int | None = Field(1, ge=1)
    """Agent runs of one episode in flight at once (each turn holds a slot); None: no bound."""
    retries: RetryConfig = RetryConfig()
    """Whole-episode retries on recorded errors (``verifiers.v1.utils.retries``); off by default."""
    timeout: EnvTimeoutConfig = EnvTimeoutConfig()
    interception: InterceptionConfig = ElasticInterceptionPoolConfig()
    """Where the interception proxy runs (``verifiers.v1.configs.interception``): the original's
    shapes load; every consumer here is local, so none changes what a run records."""


class EnvConfig(SharedEnvConfig):
    """``[env]``: the env's id and its taskset, narrowed by id. An env's own config class (a
    subclass declaring its roles as ``AgentConfig`` fields) types the roles; keys it does not
    declare are kept here and refused when the env is built (``verifiers.v1.env.Env``)."""

    model_config = ConfigDict(extra="allow")

    id: str = ""
    taskset: Annotated[TasksetConfig, AS_ANY] = TasksetConfig()

    @model_validator(mode="before")
    @classmethod
    def _narrow_taskset(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("taskset"), dict | TasksetConfig):
            data = dict(data)
            narrow_field(data, "taskset", "taskset")
        return data


def v1_taskset_class(module: ModuleType) -> type[Taskset] | None:
    """The ``Taskset`` subclass a v1 package exports, or None for a module that is not one
    (the hook the classic loader calls to tell the generations apart)."""
    names = getattr(module, "__all__", None) or ()
    if not any(isinstance(getattr(module, n, None), type) and issubclass(getattr(module, n), Taskset) for n in names):
        return None
    return plugin_class(module, Taskset, "taskset")


def merge_defaults(defaults: BaseModel, raw: dict[str, Any] | None) -> dict[str, Any]:
    """``raw`` (a config block as written) filled with what ``defaults`` sets: a run's shared knobs
    under each env's own block (the original's ``merge_defaults``).

    Only the fields set on ``defaults`` (at any depth) fill in, never its plain defaults; a value
    ``raw`` gives wins; a block of ``raw`` that names another ``id`` or ``type`` than the default's
    is ``raw``'s alone, so one plugin's knobs never reach another's.

    >>> from verifiers.v1.configs import TasksetConfig
    >>> shared = TasksetConfig(id="gsm8k", system_prompt="sys.txt")
    >>> merge_defaults(shared, {"id": "gsm8k"})
    {'id': 'gsm8k', 'system_prompt': PosixPath('sys.txt')}
    >>> merge_defaults(shared, {"id": "math"})
    {'id': 'math'}
    """
    out = dict(raw or {})
    if isinstance(defaults, SamplingConfig):  # its aliases (max_tokens, ...) in their own spelling
        out = SamplingConfig.model_validate(out).model_dump(exclude_unset=True)
    ident = _identity(defaults)
    if any(key in out and out[key] != value for key, value in ident.items()):
        return out
    for name in type(defaults).model_fields:  # a nested block merged by its own config's rules first
        value = getattr(defaults, name)
        if isinstance(value, BaseModel) and isinstance(out.get(name), dict):
            out[name] = merge_defaults(value, out[name])
    return _fill({**ident, **_set_fields(defaults)}, out)


def _identity(config: BaseModel) -> dict[str, Any]:
    return {k: getattr(config, k) for k in ("id", "type") if k in type(config).model_fields}


def _set_fields(config: BaseModel) -> dict[str, Any]:
    """What ``config`` sets, as nested plain values: its set fields and extras, and a sub-config
    whose own fields were set (named by its ``id`` / ``type``, so a switch is seen)."""
    out: dict[str, Any] = {}
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, BaseModel):
            nested = _set_fields(value)
            if nested or name in config.model_fields_set:
                out[name] = {**_identity(value), **nested}
        elif name in config.model_fields_set:
            out[name] = value
    out.update(config.model_extra or {})
    return out


def _fill(base: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in raw.items():
        below = out.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            switched = any(k in value and k in below and value[k] != below[k] for k in ("id", "type"))
            out[key] = dict(value) if switched else _fill(below, value)
        else:
            out[key] = value
    return out

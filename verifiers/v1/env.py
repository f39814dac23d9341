"""Envs: a taskset, the agents that play it, and how one task becomes one episode.

``Env[MyConfig]`` declares its roles as ``AgentConfig`` fields of its ``EnvConfig`` subclass and
writes ``run(task, agents)``; optional hooks: ``setup(agents)`` (before ``run``, once per
episode), ``finalize(task, episode)`` (cross-agent judgement after every trace is scored),
``complete(episode)`` (what ``--resume`` keeps), ``start()`` / ``stop()`` (the env's shared
resources around a whole run). An env is a plugin: by id (``best-of-n``), else the one a
taskset package exports, else ``single-agent``.

An episode is one engine rollout (``verifiers.v1.rollout`` builds the plan); the engine owns
the run: concurrency, timeouts, error recording, ``traces.jsonl``, resume and the summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from verifiers.errors import env_raised
from verifiers.v1.agents import (
    Agent,
    AgentConfig,
    Agents,
    RunContext,
    agent_config_fields,
    make_agent,
    overrides,
)
from verifiers.v1.context import running
from verifiers.v1.episode import EnvInfo, Episode
from verifiers.v1.errors import EnvError, crossed
from verifiers.v1.fields import put_field
from verifiers.v1.harness import Harness, default_harness_id, load_harness
from verifiers.v1.loading import EnvConfig, load_taskset, v1_taskset_class
from verifiers.v1.plugins import PluginError, concrete_type, import_plugin, plugin_class, validation_message
from verifiers.v1.runtimes import SubprocessConfig
from verifiers.v1.trace import Error, Trace, TraceTask

if TYPE_CHECKING:
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.task import Task


ConfigT = TypeVar("ConfigT", bound=EnvConfig, default=EnvConfig)
DEFAULT_ENV = "single-agent"


class Env(ABC, Generic[ConfigT]):
    """A taskset, the agents that play it, and how one task becomes one episode."""

    _serving: _Serving | None = None
    """What ``serving()`` holds while its block runs."""

    def __init__(self, config: ConfigT) -> None:
        config_cls = self.config_type()
        if not isinstance(config, config_cls):
            raise TypeError(f"{type(self).__name__} declares Env[{config_cls.__name__}], but was handed a {type(config).__name__}")
        refuse_unknown_keys(type(self), config)
        if not config.taskset.id:
            raise PluginError(f"{type(self).__name__} needs a taskset: set [env.taskset] id (or `vf eval <taskset-id>`)")
        self.config: ConfigT = config
        # the env's id: the one configured, else the built-in env's own, else (a taskset package's
        # own Env class, found by the loader) the taskset's id, as the episodes record it
        builtin = type(self).__module__.startswith("verifiers.v1.envs.")
        self.env_id: str = config.id or (DEFAULT_ENV if builtin else config.taskset.id)
        # what an episode records as ``env.id``, by the original's rule: the taskset id, prefixed
        # by an env id given with it (``best-of-n+gsm8k``)
        self.episode_env_id: str = f"{config.id}+{config.taskset.id}" if config.id else config.taskset.id
        self.env_args: dict[str, Any] = {}
        self.taskset = load_taskset(config.taskset)
        self._agent_specs = agent_config_fields(config)
        if not self._agent_specs:
            raise PluginError(f"{type(self).__name__} declares no agents (an AgentConfig field per role)")
        self._harnesses: dict[str, Harness] = {}
        default = None
        for name, spec in self._agent_specs.items():
            if spec.harness is None and default is None:  # the taskset package's own, else null
                default = default_harness_id(config.taskset.id)
            self._harnesses[name] = load_harness(spec.harness or default or "null")

    @classmethod
    def config_type(cls) -> type[EnvConfig]:
        return concrete_type(cls, EnvConfig, origin=Env) or concrete_type(cls, EnvConfig) or EnvConfig

    # --- the surface an env overrides ------------------------------------------------------------

    async def setup(self, agents: Agents) -> None:
        """Before ``run`` sees this episode's agents (e.g. ``agents.user.trainable = False``)."""

    @abstractmethod
    async def run(self, task: Task, agents: Agents) -> None:
        """One episode: how the agents play ``task``; each finished agent run joins the episode."""

    async def finalize(self, task: Task, episode: Episode) -> None:
        """Cross-agent judgement over the scored episode (``record_reward`` / ``record_metric``)."""

    def complete(self, episode: Episode) -> bool:
        """Whether a finished episode is kept by ``--resume`` (else it is run again)."""
        return episode.ok

    async def start(self) -> None:
        """Bring up the env's shared resources before any episode."""

    async def stop(self) -> None:
        """Tear down what ``start`` built (also after a partial ``start``)."""

    # --- machinery -------------------------------------------------------------------------------

    def has_own_finalize(self) -> bool:
        """Whether this env has a ``finalize`` of its own (the base class's does nothing)."""
        return overrides(self, Env, "finalize")

    def check(self) -> None:
        """Refuse, before any episode, a role whose harness or runtime cannot start here: one
        line each (``PluginError``)."""
        from verifiers.v1.runtimes import make_runtime

        for name, spec in self._agent_specs.items():
            if not isinstance(spec.runtime, SubprocessConfig):
                try:
                    make_runtime(spec.runtime)
                except Exception as exc:
                    raise PluginError(f"[env.{name}.runtime]: {exc}") from None
            why = self._harnesses[name].refusal(spec.runtime.type)
            if why:
                raise PluginError(f"[env.{name}.harness]: {why}")

    def agents_for(self, run_ctx: RunContext) -> Agents:
        def make(name: str, spec: AgentConfig) -> Agent:
            return make_agent(spec, name=name, harness=self._harnesses[name], run_ctx=run_ctx)

        # the roles are the ones found at init (each has its harness loaded there); their configs
        # are read now, so a role's config replaced since is the one this episode plays
        config = self.config
        specs = {name: spec for name in self._harnesses if isinstance(spec := getattr(config, name, None), AgentConfig)}
        return Agents(specs, make)

    # --- driving episodes from a trainer (the original's API) ----------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Hold what a run of episodes shares while the block runs: the env checked and started
        (``start`` / ``stop``), the interception proxy, the taskset's shared toolsets, the roles'
        own clients and the model clients made from ``ModelContext`` configs (one per endpoint,
        closed at the end). Plan with ``slots`` and play with ``run_slot`` / ``run_episode``
        inside it. Blocks that overlap (a ``run_episode`` outside one, concurrent callers) share
        one: the first starts it, the others wait for that, the last one out closes it."""
        from verifiers.v1.rollout import EpisodeRunner

        lock = self._serving_lock_of()
        async with lock:
            serving = self._serving
            if serving is None:
                self.check()  # a refusal before anything started: nothing to stop
                runner = EpisodeRunner(self)
                try:
                    await runner.start()
                except BaseException:
                    await runner.close()  # stop() also after a partial start()
                    raise
                serving = self._serving = _Serving(runner)
            serving.users += 1
        try:
            yield
        finally:
            async with lock:
                serving.users -= 1
                last = serving.users == 0
                if last:
                    self._serving = None
            if last:
                try:
                    await serving.close_clients()
                finally:
                    await serving.runner.close()

    def _serving_lock_of(self) -> asyncio.Lock:
        """The lock around ``serving()``'s start and close, one per event loop (an env may be
        served again under a later ``asyncio.run``)."""
        loop = asyncio.get_running_loop()
        held = self.__dict__.get("_serving_lock")
        if held is None or held[0] is not loop:
            held = self.__dict__["_serving_lock"] = (loop, asyncio.Lock())
        return held[1]

    def slots(self, task: Task, n: int = 1) -> list[RunSlot]:
        """``n`` independent episodes of ``task`` to play (``-r n``)."""
        if n < 1:
            raise ValueError("a task needs at least one rollout (n >= 1)")
        return [RunSlot(task) for _ in range(n)]

    async def run_slot(
        self, slot: RunSlot, ctx: ModelContext, semaphore: asyncio.Semaphore | None = None,
        on_complete: Callable[[Episode], Awaitable[None]] | None = None, on_trace: Callable[[Trace], None] | None = None,
    ) -> Episode:  # fmt: skip
        """Play one planned episode to its end, again while it fails with an error the env's
        ``[env.retries]`` allow another try for (each try's errors go first on the final one).
        ``semaphore`` bounds episodes in flight (held for a whole try, not across a retry's
        backoff or ``on_complete``); ``on_trace`` sees each trace as it is minted, after it
        joined ``slot.traces`` (a retry starts the list afresh); ``on_complete`` gets the final
        episode."""
        from verifiers.v1.utils.retries import retry_episode

        async def attempt() -> Episode:
            slot.traces = []
            live = slot.traces

            def minted(trace: Trace) -> None:
                live.append(trace)
                if on_trace is not None:
                    on_trace(trace)

            def discard(trace: Trace) -> None:
                with contextlib.suppress(ValueError):
                    live.remove(trace)

            async with semaphore if semaphore is not None else contextlib.nullcontext():
                return await self.run_episode(slot.task, ctx, on_trace=minted, on_discard=discard)

        if slot.started is None:
            slot.started = time.time()
        episode = await attempt()
        retry = getattr(self.config, "retries", None)
        if retry is not None and (retry.max_retries or retry.rules):
            episode, history = await retry_episode(episode, attempt, retry)
            if history:
                episode.errors[:0] = history  # its standing (ok) stays the last try's
        slot.traces = list(episode.traces)
        slot.episode = episode
        slot.done = True
        if on_complete is not None:
            await on_complete(episode)
        return episode

    async def run_episode(
        self, task: Task, ctx: ModelContext, *, on_trace: Callable[[Trace], None] | None = None,
        on_discard: Callable[[Trace], None] | None = None,
    ) -> Episode:  # fmt: skip
        """One whole episode of ``task`` against ``ctx``'s model: ``setup`` and ``run`` over fresh
        agents (each run scored as it ends), then ``finalize``; a failure is on the episode
        (``errors``, ``ok`` False), never raised. ``on_trace`` sees each trace as it is minted,
        ``on_discard`` one an agent's own retry abandoned. Inside ``serving()`` the episode uses
        its resources; outside one, it opens one for itself (shared with any episode that
        overlaps it; ``start`` and ``stop`` around them)."""
        from verifiers.v1.rollout import finalize_episode

        async with self.serving():  # the trainer's own, else one for this episode (shared with any overlapping)
            assert self._serving is not None
            run_ctx = self._serving.run_context(self, ctx, on_trace, on_discard)
            episode = await self.play_episode(task, run_ctx)
            with running(run_ctx):
                await finalize_episode(self, task, episode)
        return episode

    async def play_episode(self, task: Task, run_ctx: RunContext) -> Episode:
        """Play one episode: its traces, each scored as its run ended (the env's ``finalize`` is
        still to run). An exception of ``run`` fails the episode (recorded, not raised)."""
        finished: list[Trace] = []
        previous = run_ctx.on_trace
        run_ctx.on_trace = finished.append  # each run that ends (one cut off mid-way never does)
        record = TraceTask.of(task)
        run_ctx.task_record = (task, task.data, record)  # the agents' traces of this task copy it
        episode = Episode(env=EnvInfo(id=self.episode_env_id, name=type(self).__name__), task=record)
        limit = self.config.timeout.episode
        deadline = asyncio.timeout(limit)
        timed_out = False
        hook = "setup"
        owner = asyncio.current_task()
        try:
            agents = self.agents_for(run_ctx)
            with running(run_ctx):
                async with deadline:
                    if overrides(self, Env, "setup"):  # the base class's setup does nothing
                        await self.setup(agents)
                    hook = "run"
                    await self.run(task, agents)
            if not finished:
                raise EnvError(f"{type(self).__name__}.run() played no agent: an episode needs at least one agent run")
        except BaseException as exc:
            if not env_raised(exc, owner):
                raise  # a cancelled episode (the rollout's timeout) is never finalized; its runs' boxes are stopped
            if isinstance(exc, TimeoutError) and deadline.expired():  # [env.timeout] episode: the runs finished by then stay
                timed_out = True
                message = f"{type(self).__name__}.run() ran past its {limit:g} s deadline ([env.timeout] episode)"
                episode.errors.append(Error(type="TimeoutError", message=message))
            else:  # as the original's boundary: EnvError "MyEnv.run(): KeyError: ..."
                err = crossed(f"{type(self).__name__}.{hook}()", exc)
                episode.errors.append(Error(type=type(err).__name__, message=str(err), status_code=getattr(err, "status_code", None),
                                            traceback=traceback.format_exc()))  # fmt: skip
        finally:
            run_ctx.on_trace = previous
        put_field(episode, "traces", finished)
        put_field(episode, "ok", not episode.errors and all(t.ok for t in finished) and bool(finished))
        put_field(episode, "is_timeout", timed_out)  # the env's own deadline only; a run's stage deadline flags its trace
        return episode



@dataclass
class RunSlot:
    """One planned episode, to watch while it plays: ``traces`` holds the try under way (a retry
    starts it afresh); ``episode`` and ``done`` are set when it ends; ``started`` when it began."""

    task: Task
    traces: list[Trace] = field(default_factory=list)
    episode: Episode | None = None
    done: bool = False
    started: float | None = None

    @classmethod
    def finished(cls, episode: Episode) -> RunSlot:
        from verifiers.v1.task import Task

        return cls(task=Task(episode.task.data), traces=list(episode.traces), episode=episode, done=True)


class _Serving:
    """What ``Env.serving()`` holds: the run's resources and a model client per endpoint config."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.users = 0
        self.clients: dict[str, Any] = {}
        self.wires: dict[int, Any] = {}

    def client_of(self, ctx: ModelContext) -> Any:
        from verifiers.v1.configs.client import BaseClientConfig

        config = ctx.client
        if not isinstance(config, BaseClientConfig):
            return config  # a live model client, its owner's to close
        key = config.model_dump_json()
        client = self.clients.get(key)
        if client is None:
            from verifiers.clients import ModelClient

            client = self.clients[key] = ModelClient.from_any(config.client_fields())
        return client

    def run_context(self, env: Env, ctx: ModelContext, on_trace: Any, on_discard: Any) -> RunContext:
        runner = self.runner
        limit = getattr(env.config, "max_concurrent_agents", None)
        from verifiers.v1.configs.client import TrainClientConfig, with_token_data

        sampling = ctx.sampling_args()
        if isinstance(ctx.client, TrainClientConfig):  # a trainer's: its traces carry token ids and logprobs
            sampling = with_token_data(sampling)
        return RunContext(
            client=self.client_of(ctx), model=ctx.model, sampling=sampling, proxy=runner.proxy,
            gate=asyncio.Semaphore(limit) if limit else None, clients=runner.clients, toolsets=runner.toolsets,
            on_open=on_trace, on_discard=on_discard, wires=self.wires,
        )  # fmt: skip

    async def close_clients(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


# --- loading by id ---------------------------------------------------------------------------------


def import_environment(env_id: str) -> Any:
    return import_plugin(env_id, "environment")


def refuse_unknown_keys(env_cls: type, config: EnvConfig) -> None:
    """An env config's keys its class does not declare (a role the env has not) are refused."""
    if config.model_extra:
        raise PluginError(
            f"env {env_cls.__name__}: unknown keys {', '.join(sorted(config.model_extra))} "
            f"(its roles: {', '.join(agent_config_fields(config)) or 'none'})"
        )


def environment_class(taskset_id: str | None = None, env_id: str | None = None) -> type[Env]:
    """The env ``env_id`` names; else the one the taskset package exports; else ``single-agent``
    (the original's argument order: the taskset first)."""
    if env_id:
        return plugin_class(import_environment(env_id), Env, "environment")
    if taskset_id:
        module = import_plugin(taskset_id, "taskset")
        names = getattr(module, "__all__", ()) or ()
        envs = [getattr(module, n) for n in names if isinstance(getattr(module, n, None), type) and issubclass(getattr(module, n), Env) and getattr(module, n) is not Env]
        if len(envs) == 1:
            return envs[0]
        if len(envs) > 1:
            raise PluginError(f"taskset {taskset_id!r} exports {len(envs)} Env subclasses; export at most one")
    return plugin_class(import_environment(DEFAULT_ENV), Env, "environment")


def env_config_type(taskset_id: str | None = None, env_id: str | None = None) -> type[EnvConfig]:
    return environment_class(taskset_id, env_id).config_type()


def resolve_env_config(data: dict[str, Any] | EnvConfig | None) -> EnvConfig:
    """Validate raw env config (a CLI, a TOML file, the env-server wire) into the config class of
    the env it names (``id``, else the taskset package's own env, else ``single-agent``), as the
    original does: its roles typed, its knobs checked, its taskset narrowed. An ``EnvConfig``
    already of that class (or a subclass) is returned as it is."""
    from pydantic import ValidationError
    if data is not None and not isinstance(data, dict | EnvConfig):
        raise PluginError(f"an env config is a table, not {type(data).__name__}")
    if isinstance(data, EnvConfig):
        cls = environment_class(data.taskset.id or None, data.id or None).config_type()
        if isinstance(data, cls):
            return data
        data = data.model_dump(exclude_unset=True, serialize_as_any=True) | {"id": data.id, "taskset": data.taskset}
    raw = dict(data or {})
    taskset = raw.get("taskset")
    taskset_id = taskset.get("id") if isinstance(taskset, dict) else getattr(taskset, "id", None)
    env_cls = environment_class(taskset_id or None, raw.get("id") or None)
    try:
        validated = env_cls.config_type().model_validate(raw)
    except ValidationError as exc:
        raise PluginError(f"env config: {validation_message(exc)}") from None
    refuse_unknown_keys(env_cls, validated)
    return validated


def load_environment(config: dict[str, Any] | EnvConfig) -> Env:
    """The env ``config`` (an ``[env]`` table) names, with its config validated into the env's
    own class (roles typed, taskset narrowed). One ``PluginError`` line for a bad config."""
    validated = resolve_env_config(config)
    return environment_class(validated.taskset.id or None, validated.id or None)(validated)


def env_table(taskset_id: str, env_args: dict[str, Any]) -> dict[str, Any]:
    """The ``[env]`` table a v1 package's ``env_args`` describe: the table itself (``taskset``,
    ``id``, roles ...) or, when none of its keys is an env key, the taskset's own knobs."""
    env_keys = set(environment_class(taskset_id, env_args.get("id") or None).config_type().model_fields)
    if env_args and set(env_args) <= env_keys:
        table = dict(env_args)
        taskset = table.get("taskset")
        table["taskset"] = {**(taskset if isinstance(taskset, dict) else {}), "id": taskset_id}
    else:
        table = {"taskset": {**env_args, "id": taskset_id}}
    return table


def v1_factory(module: ModuleType, taskset_id: str) -> Any:
    """For the classic loader: a ``load_environment(**env_args)`` for a v1 package (``env_args``
    as :func:`env_table` reads them), or None for a module that is not one."""
    if v1_taskset_class(module) is None:
        return None

    def factory(**env_args: Any) -> Any:
        return load_environment(env_table(taskset_id, env_args))

    return factory


__all__ = ["Env", "EnvConfig", "env_config_type", "environment_class", "import_environment", "load_environment", "resolve_env_config"]

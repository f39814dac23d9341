"""Agents: one role of an env (``[env.<role>]``), its config, and what an env's ``run`` calls.

``Agent.run(task)`` plays one task to its end and returns the scored trace;
``Agent.interaction(task)`` opens a conversation whose ``.turn(message)`` returns each
``Segment`` (the env relays between agents: user-sim). Each run is its own trace: a fresh
runtime, the task's ``setup`` / ``finalize``, its stop and intercept hooks on every model call,
the harness's loop. A failure inside a run is recorded on its trace (the env decides what it
means); only a cancellation propagates.

Scoring is not done here: the episode's traces are scored after the env's ``run`` by the
engine's scoring stage (``verifiers.v1.rollout.V1Scorer``), while their runtimes are still up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Generic

from pydantic import Field, field_validator, model_validator
from typing_extensions import TypeVar

from verifiers.errors import env_raised
from verifiers.v1.configs import BaseConfig, WireAgentConfig
from verifiers.v1.configs.retries import RetryConfig
from verifiers.v1.errors import HarnessError, RolloutError, SandboxError, TaskError, ToolsetError, crossed
from verifiers.v1.fields import AS_ANY, put_field
from verifiers.v1.harness import (
    Harness,
    HarnessConfig,
    chat_loop,
    done_launching,
    last_reply,
    launching,
    load_harness,
    tool_functions,
)
from verifiers.v1.plugins import narrow_field
from verifiers.v1.policy import prepare_users
from verifiers.v1.runtimes import (
    RuntimeConfig,
    SubprocessConfig,
    make_runtime,
    placement_refusal,
    resolve_runtime_config,
    task_runtime_config,
)
from verifiers.v1.scoring import invoke
from verifiers.v1.task import Task
from verifiers.v1.trace import CHAT_ENDPOINT, AgentInfo, Trace, TraceTask
from verifiers.v1.types import Messages, SamplingConfig, SystemMessage, UserMessage, content_text
from verifiers.v1.utils.retries import RetryState, backoff

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from verifiers.v1.interception import CallContext, InterceptionServer
    from verifiers.v1.mcp.client import SharedToolsets
    from verifiers.v1.runtimes import Runtime


class TimeoutConfig(BaseConfig):
    """Seconds per stage of one agent run (None: the task's own, else none)."""

    setup: float | None = Field(None, gt=0)
    rollout: float | None = Field(None, gt=0)
    finalize: float | None = Field(None, gt=0)
    scoring: float | None = Field(None, gt=0)


class AgentClientConfig(BaseConfig):
    """A role's own model endpoint (else the run's): ``base_url``, ``api_key_var``, ``headers``."""

    base_url: str
    api_key_var: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(None, gt=0)


class AgentConfig(BaseConfig):
    """``[env.<role>]``: one agent role. Unset fields fall back to the run's (model, client,
    sampling) or the taskset's default harness."""

    harness: Annotated[HarnessConfig, AS_ANY] | None = None
    runtime: Annotated[RuntimeConfig, AS_ANY] = SubprocessConfig()
    """The embedded default is the local subprocess runtime (the original's is a hosted sandbox)."""
    model: str | None = None
    client: AgentClientConfig | None = None
    sampling: SamplingConfig | None = None
    max_turns: int | None = None
    """Model replies one run may get (then it stops as ``max_turns``; 0 or less: none at all)."""
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    timeout: TimeoutConfig = TimeoutConfig()
    retries: RetryConfig = RetryConfig()
    """Whole-run retries on recorded errors (``verifiers.v1.utils.retries``); off by default."""
    network_notice: bool = True

    @model_validator(mode="before")
    @classmethod
    def _narrow(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            narrow_field(data, "harness", "harness")
        return data

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> Any:
        return resolve_runtime_config(value)

    def wire(
        self, *, model: str | None = None, sampling: Mapping[str, Any] | None = None, client: Any = None, harness: Any = None,
    ) -> WireAgentConfig:  # fmt: skip
        """The config as a trace records it: with ``model``, ``sampling``, ``client`` and ``harness``,
        the role's settings as the run resolved them (the run's model, the merged sampling, the run's
        endpoint where the role names none, the harness it plays, the taskset's own when the role
        pins none), as the original records them."""
        data = self.model_dump(mode="json", exclude_none=True, serialize_as_any=True)
        if "harness" not in data and harness is not None:
            data["harness"] = harness.config.model_dump(mode="json", exclude_none=True)
        if model is not None:
            data["model"] = model
        if sampling:
            data["sampling"] = {k: v for k, v in sampling.items() if k != "extra_headers"}  # headers may hold secrets
        if "client" not in data and client is not None and isinstance(getattr(client, "base_url", None), str):
            # the run's endpoint: where the calls went, never its key (only the variable's name)
            data["client"] = {"base_url": client.base_url, "api_key_var": getattr(getattr(client, "config", None), "api_key_var", None)}
        if isinstance(data.get("client"), dict):
            data["client"] = _client_record(data["client"])
        return WireAgentConfig.model_validate(data)


def _client_record(client: dict[str, Any]) -> dict[str, Any]:
    """A role's endpoint in the original's client-config shape (its records are read by the
    original, whose ``client`` is a union on ``type``): an eval endpoint, the key variable only
    when one is named, a whole-request timeout as the time between received bytes."""
    out = {k: v for k, v in client.items() if v is not None}
    if isinstance(out.get("timeout"), (int, float)):
        out["timeout"] = {"read": float(out["timeout"])}
    out.setdefault("type", "eval")
    return out


@dataclass
class Segment:
    """What one ``turn`` produced: its new messages, and whether the run ended (a stop, an error,
    ``max_turns``)."""

    messages: Messages
    root_reply: str | None = None
    terminated: bool = False

    @property
    def last_reply(self) -> str:
        return last_reply(self.messages)


MAX_WIRES = 64
"""Role config records a run keeps (``RunContext.wire_of``); more configs than this (an env that
makes one per episode) start the cache afresh."""


@dataclass
class RunContext:
    """What every agent of one episode shares: the run's client, model and sampling, the proxy,
    the gate on agents running at once, and where finished traces go."""

    client: Any
    model: str
    sampling: dict[str, Any] = field(default_factory=dict)
    proxy: Callable[[], Any] | None = None
    gate: asyncio.Semaphore | None = None
    clients: dict[str, Any] = field(default_factory=dict)
    on_trace: Callable[[Trace], None] | None = None
    """Where each finished (scored) run's trace goes: the episode playing it."""
    toolsets: SharedToolsets | None = None
    """The taskset's shared toolsets (the run starts and closes them); None: the taskset's
    ``toolsets()`` are not served."""
    task_record: tuple[Any, Any, TraceTask] | None = None
    """(task, its data, the episode's record of it): a trace of that same task copies the record
    instead of hashing the task's data again."""
    wires: dict[int, tuple[AgentConfig, tuple[Any, ...], tuple[Any, ...], WireAgentConfig]] = field(default_factory=dict)
    """Each role config's record (``AgentConfig.wire``), made once per run: a run shares one dict
    between its episodes."""

    def wire_of(
        self, config: AgentConfig, *, model: str | None = None, sampling: Mapping[str, Any] | None = None, client: Any = None,
        harness: Any = None,
    ) -> WireAgentConfig:  # fmt: skip
        """``config.wire(model=, sampling=, client=)``, made again only when a field of ``config``
        was assigned since (an env that sets ``max_turns`` per episode) or the resolved settings
        differ (an env server's requests each name their model and sampling); the traces of one
        role share it (a record, read only)."""
        values = tuple(config.__dict__.values())
        # an entry holds its config and client, so no other object has their ids while it is kept
        made = self.wires.get(id(config))
        if (
            made is None or any(a is not b for a, b in zip(made[1], values, strict=True))
            or made[2][0] != model or made[2][2] is not client or made[2][1] != sampling or made[2][3] is not harness
        ):  # fmt: skip
            if made is None and len(self.wires) >= MAX_WIRES:
                self.wires.clear()  # an env that builds a fresh config per episode: the run's cache stays small
            wire = config.wire(model=model, sampling=sampling, client=client, harness=harness)
            made = self.wires[id(config)] = (config, values, (model, None if sampling is None else dict(sampling), client, harness), wire)
        return made[3]

    def record_of(self, task: Task) -> TraceTask | None:
        rec = self.task_record
        if rec is not None and rec[0] is task and rec[1] is task.data:
            return rec[2].model_copy()
        return None
    on_open: Callable[[Trace], None] | None = None
    """Called with each trace as it is minted (an env server streams it from there on)."""
    on_discard: Callable[[Trace], None] | None = None
    """Called with each trace of a run's try that its ``[env.<role>.retries]`` abandoned."""


class Interaction:
    """One agent's open conversation on one task."""

    def __init__(self, agent: Agent, task: Task, trace: Trace, runtime: Runtime, ctx: CallContext) -> None:
        self.agent, self.task, self._trace, self.runtime, self.ctx = agent, task, trace, runtime, ctx
        self.time_left: float | None = agent.config.timeout.rollout or task.data.timeout.agent
        """Seconds of the run's agent budget its turns have not spent (None: no bound): as the
        original, only the harness's own turns count, not the time the env holds the run open."""
        self.messages: list[Any] = []
        self.opening = False
        """Whether the turn under way sends the task's own prompt (the first one)."""
        self.launched = False
        """Whether the turn under way ran the shared chat program (``harnesses.utils.launch``)."""
        self.tools: dict[str, Any] = {}
        """What the harness offers the model: in-process functions and MCP tools, by name."""
        self.mcp_tools = False
        """Whether ``tools`` holds MCP tools (a toolset's): only our loop can offer them."""
        self.session: Any = None
        """The harness's session, for a harness written for the session contract
        (``Harness.drives_sessions``): one for all the turns, closed when the run ends."""
        self.session_endpoint: str | None = None
        self.borrowed = False
        """Whether ``runtime`` is a box lent by another run (its network grant is not lifted here)."""
        self.turn_start = 0
        """Where the turn under way's new messages (the caller's) begin in ``messages``."""
        system = agent.harness.system_prompt(task.data.system_prompt)
        self.system_added = bool(system)
        if system:
            self.messages.append(SystemMessage(content=system))

    @property
    def trace(self) -> Trace:
        return self._trace

    async def turn(self, message: str | Messages | None = None) -> Segment:
        """Send ``message`` (text, messages, or None: the task's own prompt on the first turn)
        and let the harness run until the model answers; a turn after the run ended is empty."""
        trace = self._trace
        if trace.is_completed:
            return Segment([], terminated=True)
        self.opening = message is None and len(self.messages) <= 1  # the task's own prompt, first
        self.turn_start = len(self.messages)
        if self.opening:
            message = self.task.data.prompt
        if isinstance(message, str):
            if message or not self.opening:  # an empty task prompt sends no user message (the original's)
                self.messages.append(UserMessage(content=message))
        elif message:
            self.messages.extend(message)
        before = len(self.messages)
        owner = asyncio.current_task()
        gate = self.agent.run_ctx.gate
        async with gate if gate is not None else contextlib.nullcontext():
            started = time.monotonic()
            budget = asyncio.timeout(self.time_left)
            try:
                async with budget:
                    if self.ctx.intercepts:
                        # as the original: the caller's new user messages are rewritten by the task's request
                        # hooks before the harness stores them (the hooks see no tools), not again on its call
                        self.messages = await prepare_users(self.ctx, self.messages)
                    self.messages = await self.agent._play(self)
            except TimeoutError as exc:
                if budget.expired():  # the agent's time budget is spent: a stop, not a failure
                    trace.record_timeout("agent")
                else:
                    trace.record_error(crossed(f"harness {self.agent.harness.config.id!r}", exc, HarnessError))
            except BaseException as exc:  # a SystemExit or GeneratorExit of the code's own too: recorded, the run goes on
                if not env_raised(exc, owner):
                    raise
                if not getattr(exc, "recorded", False):  # a failed hook is on the trace already
                    trace.record_error(crossed(f"harness {self.agent.harness.config.id!r}", exc, HarnessError))
            finally:
                if self.time_left is not None:
                    self.time_left = max(0.0, self.time_left - (time.monotonic() - started))
        # a run at its max_turns is not over until its next turn is refused (as in the original: the
        # env may still answer its last reply; the next turn ends it as max_turns)
        segment = Segment(self.messages[before:], terminated=trace.is_completed)
        put_field(trace, "root_reply", segment.last_reply or trace.root_reply)
        return segment


class Agent:
    """One role of one episode: ``run(task)`` and ``interaction(task)``."""

    def __init__(self, config: AgentConfig, *, name: str = "agent", harness: Harness | None = None, run_ctx: RunContext | None = None) -> None:
        self.config = config
        self.name = name
        self.harness = harness if harness is not None else load_harness(config.harness or "null")
        if run_ctx is None:
            raise ValueError("an Agent needs the run's context (model client); build it through make_agent")
        self.run_ctx = run_ctx
        self.trainable = True

    @property
    def model(self) -> str:
        return self.config.model or self.run_ctx.model

    def _client(self) -> Any:
        cfg = self.config.client
        if cfg is None:
            return self.run_ctx.client
        key = cfg.model_dump_json()
        if key not in self.run_ctx.clients:
            from verifiers.clients import ModelClient

            fields = cfg.model_dump(exclude_none=True)
            self.run_ctx.clients[key] = ModelClient.from_any(fields)
        return self.run_ctx.clients[key]

    def _token_limits(self) -> tuple[int | None, int | None, int | None] | None:
        c = self.config
        limits = (c.max_input_tokens, c.max_output_tokens, c.max_total_tokens)
        return None if limits == (None, None, None) else limits

    def _sampling(self) -> dict[str, Any]:
        own = self.config.sampling.model_dump(exclude_none=True) if self.config.sampling is not None else {}
        return {**self.run_ctx.sampling, **own}

    async def run(self, task: Task, *, runtime: Runtime | None = None, collect_artifacts: bool = False) -> Trace:
        """Play ``task`` to its end (the task's prompt is the first message); the trace.
        ``runtime``: a live box to borrow (see ``provision``) instead of a fresh one; it is
        neither started nor stopped here. ``collect_artifacts``: after the task's finalize,
        archive its declared artifacts into ``trace.state.artifacts`` (``verifiers.v1.artifacts``)."""
        retry = self.config.retries
        if not (retry.max_retries or retry.rules):  # the common case: one try, handed on as it ends
            return await self._run_once(task, runtime, collect_artifacts, None)
        # whole-run retries (``[env.<role>.retries]``): each try on a fresh trace and box, scored as
        # it ends; a try that is retried is not handed on, and its errors go first on the final trace
        state, history = RetryState(retry), []
        for attempt in range(state.max_retries + 1):
            held: list[Trace] = []
            trace = await self._run_once(task, runtime, collect_artifacts, held)
            again = attempt < state.max_retries and not trace.ok and state.next_error(trace.errors) is not None
            if again and runtime is not None:
                logger.warning("not retrying the run in a borrowed box (its state is no longer the task's start); the error stands")
                again = False
            if not again:
                if history:
                    trace.errors[:0] = history  # its standing (ok) stays the last try's
                for kept in held:
                    self._hand_on(kept)
                return trace
            history.extend(trace.errors)
            if self.run_ctx.on_discard is not None:
                for dropped in held:
                    self.run_ctx.on_discard(dropped)
            logger.warning("retrying %s's run (retry %d of at most %d) after %s", self.name, attempt + 1, state.max_retries, trace.errors[-1].type if trace.errors else "an error")
            await asyncio.sleep(backoff(attempt))
        return trace  # not reached: the last try always returns

    async def _run_once(self, task: Task, runtime: Runtime | None, collect_artifacts: bool, held: list | None) -> Trace:
        async with self.interaction(task, runtime=runtime, collect_artifacts=collect_artifacts, _held=held) as it:
            await it.turn()
            if not it.trace.is_completed and not it.trace.errors:
                it.trace.stop("agent_completed")
        return it.trace

    def _hand_on(self, trace: Trace) -> None:
        """A finished (scored) run's trace to the episode."""
        if self.run_ctx.on_trace is not None:
            self.run_ctx.on_trace(trace)

    @contextlib.asynccontextmanager
    async def provision(self, task: Task | None = None) -> AsyncIterator[Runtime]:
        """A started box from this role's runtime config, stopped on exit: share it between runs
        with ``run(task, runtime=box)``."""
        runtime = make_runtime(task_runtime_config(self.config.runtime, getattr(task.data, "resources", None)) if task is not None else self.config.runtime)
        await runtime.start()
        try:
            yield runtime
        finally:
            await runtime.stop()

    @contextlib.asynccontextmanager
    async def interaction(
        self, task: Task, *, runtime: Runtime | None = None, collect_artifacts: bool = False, _held: list | None = None,
    ) -> AsyncIterator[Interaction]:  # fmt: skip
        from verifiers.v1.interception import CallContext
        from verifiers.v1.mcp.client import ToolServers, finish

        # as the original: a task whose Docker image or network policy its runtime (its own, or
        # the one it borrows) cannot keep fails the env's run, before a trace is minted
        if runtime is not None:
            placed = getattr(runtime, "config", None)
        else:
            try:
                placed = task_runtime_config(self.config.runtime, getattr(task.data, "resources", None))
            except Exception:
                placed = None  # a config that cannot be made: recorded on the trace, where the runtime is made
        refused = placement_refusal(placed, task.data) if placed is not None else None
        if refused is not None:
            raise ValueError(refused)
        servers = ToolServers()
        try:
            client, sampling, model = self._client(), self._sampling(), self.model
            wire = self.run_ctx.wire_of(self.config, model=model, sampling=sampling, client=client, harness=self.harness)
            trace = Trace.for_task(task, record=self.run_ctx.record_of(task), agent=AgentInfo(config=wire, name=self.name, trainable=self.trainable))
            # the run's own writes to its trace's plain fields (no validator, no watcher on them) go
            # straight to the model's dict: pydantic's __setattr__ is a cost per write. ``ok``
            # stays False until the run has ended (its hooks, finalize and scoring read it False,
            # as in the original)
            if self.run_ctx.on_open is not None:
                self.run_ctx.on_open(trace)
            borrowed = runtime is not None
            timing = trace.timing
            agent_info = trace.agent
            put_field(timing.boot, "start", time.time())
            # the box's description, and whether the run borrowed it (the original's ``borrowed``)
            if borrowed:
                put_field(agent_info, "runtime", {**runtime.info, "borrowed": True})  # type: ignore[union-attr]
            else:
                try:
                    runtime = make_runtime(task_runtime_config(self.config.runtime, getattr(task.data, "resources", None)))
                    put_field(agent_info, "runtime", {**runtime.info, "borrowed": False})
                    refused = runtime.refuse_task(task.data)
                    if refused is not None:
                        raise SandboxError(refused)
                    await runtime.start()
                    put_field(agent_info, "runtime", {**runtime.info, "borrowed": False})
                except (asyncio.CancelledError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    runtime = None
                    trace.record_error(exc if isinstance(exc, SandboxError) else SandboxError(str(exc)))
            ctx = CallContext.for_task(
                task, client=client, model=model, trace=trace, runtime=runtime,
                sampling=sampling, max_turns=self.config.max_turns, endpoint=CHAT_ENDPOINT,
                gates_tools=self.harness.IN_PROCESS, token_limits=self._token_limits(),
            )  # fmt: skip
            it = Interaction(self, task, trace, runtime, ctx)  # type: ignore[arg-type]
            it.borrowed = borrowed
            now = time.time()
            put_field(timing.boot, "end", now)
            put_field(timing.setup, "start", now)
            if runtime is not None and not trace.is_completed:
                # the base classes' hooks do nothing: a stage is run only for an override
                if overrides(task, Task, "setup"):
                    await self._stage(trace, "setup", lambda: invoke(task.setup, {"trace": trace, "runtime": runtime}), self.config.timeout.setup or task.data.timeout.setup, "task setup")
                if overrides(self.harness, Harness, "setup") and not trace.is_completed:  # not after a failed task setup
                    await self._stage(trace, "setup", lambda: self.harness.setup(runtime), self.config.timeout.setup, "harness setup", HarnessError)
            if runtime is not None and not trace.is_completed:
                await self._open_tools(it, servers, self.config.timeout.setup or task.data.timeout.setup)
            now = time.time()
            put_field(timing.setup, "end", now)
            put_field(timing.agent, "start", now)
            try:
                yield it
            except Exception as exc:
                # the env's own code failed while it held the run open: as the original, the run
                # fails with it (neither finalized nor scored), and the error goes on to the env
                if not getattr(exc, "recorded", False):
                    trace.record_error(exc)
                raise
            finally:
                try:
                    await self._close_session(it)
                    await self._finish(it, collect_artifacts)
                finally:
                    # the run's own box ends with it on every path, as in the original (a borrowed
                    # box is its owner's, stopped when the owner's block ends)
                    if runtime is not None and not borrowed:
                        with contextlib.suppress(Exception):
                            await runtime.stop()
                current = asyncio.current_task()
                if _held is not None:
                    _held.append(trace)  # ``run`` decides: handed on, or retried
                elif current is None or not current.cancelling():  # a run cut off mid-way never joins the episode
                    self._hand_on(trace)
        finally:
            # the rollout's own tool servers end with it, on every path (a cancel included), after
            # its trace is handed on; a rollout that started none has nothing to wait for
            if servers.own:
                await finish(servers.close())
            else:
                servers.tools = {}

    async def _close_session(self, it: Interaction) -> None:
        """The end of a harness session (the agent phase is over): the session closed, its
        endpoint no longer served and (on the run's own box) its network grant lifted; a failure
        to close is logged, the run is scored as it stands."""
        session, endpoint = it.session, it.session_endpoint
        if session is None and endpoint is None:
            return
        it.session = it.session_endpoint = None
        owner = asyncio.current_task()
        try:
            if session is not None:  # (None: the harness's session() itself failed)
                await session.close()
        except BaseException as exc:
            if not env_raised(exc, owner):
                raise
            # as the original: a teardown failure is logged, never a reason to discard a finished
            # run's scoreable transcript
            logger.warning("harness %r: closing its session failed: %s: %s", self.harness.config.id, type(exc).__name__, exc)
        finally:
            proxy = await self.run_ctx.proxy() if self.run_ctx.proxy is not None else None
            if proxy is not None and endpoint is not None:
                proxy.unregister(endpoint)
            if it.runtime is not None and not it.borrowed:  # a shared box keeps its grant for its other runs
                with contextlib.suppress(Exception):
                    await it.runtime.prepare_execution(None)

    async def _finish(self, it: Interaction, collect_artifacts: bool) -> None:
        """The end of a run, as the original's: the task's finalize (and the artifacts), then the
        scoring, in the run's box, so the env's run() reads the rewards of the runs it played.
        A run that failed (an error; a timeout is a stop, not a failure) or is being cancelled is
        neither finalized nor scored."""
        trace, task, runtime, timing = it.trace, it.task, it.runtime, it.trace.timing
        now = time.time()
        put_field(timing.agent, "end", now)
        put_field(timing.finalize, "start", now)
        trace.split_agent_time()
        current = asyncio.current_task()
        going_on = runtime is not None and not (current is not None and current.cancelling())
        if going_on and not trace.errors:
            if overrides(task, Task, "finalize"):  # the base class's finalize does nothing
                await self._stage(trace, "finalize", lambda: invoke(task.finalize, {"trace": trace, "runtime": runtime}), self.config.timeout.finalize or task.data.timeout.finalize, "task finalize")
            if collect_artifacts and task.data.artifacts and not trace.errors:
                await self._collect(trace, task, runtime)
        now = time.time()
        put_field(timing.finalize, "end", now)
        if not trace.is_completed:
            # the env left the interaction with the run still going (the original's name)
            trace.stop("user_closed")
        if going_on and not trace.errors:
            put_field(timing.scoring, "start", now)
            await self._score(trace, task, runtime)
            put_field(timing.scoring, "end", time.time())
        put_field(trace, "ok", not trace.errors)

    async def _score(self, trace: Trace, task: Task, runtime: Runtime) -> None:
        """The task's metrics and rewards and the harness's metrics, under the role's
        ``timeout.scoring``, else the task's, for the whole; past it, a ``scoring_timeout`` stop."""
        limit = self.config.timeout.scoring or task.data.timeout.scoring
        owner = asyncio.current_task()
        try:
            async with asyncio.timeout(limit):
                if overrides(self.harness, Harness, "score") or self.harness.has_metrics():
                    # both run to their end (no half of the scoring goes on after the run has ended)
                    results = await asyncio.gather(task.score(trace, runtime), self.harness.score(trace, runtime), return_exceptions=True)
                    failed = next((r for r in results if isinstance(r, BaseException)), None)
                    current = asyncio.current_task()
                    if isinstance(failed, asyncio.CancelledError) and not (current is not None and current.cancelling()):
                        failed = TaskError("scoring: a scoring hook was cancelled")  # its own doing, not this run's cancel
                    if failed is not None:
                        raise failed
                else:
                    await task.score(trace, runtime)
        except TimeoutError:
            trace.record_timeout("scoring")
        except BaseException as exc:
            if not env_raised(exc, owner):
                raise
            if not getattr(exc, "recorded", False):  # as the original words a scoring failure
                trace.record_error(exc if isinstance(exc, RolloutError) else TaskError(f"task {type(task).__name__} scoring: {type(exc).__name__}: {exc}"))

    async def _collect(self, trace: Trace, task: Task, runtime: Runtime) -> None:
        from verifiers.v1.artifacts import collect

        try:
            trace.state.artifacts = await collect(runtime, task.data.artifacts, max_bytes=task.data.artifact_max_bytes)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            trace.record_error(exc if isinstance(exc, SandboxError) else SandboxError(f"collecting artifacts: {exc}"))

    async def _open_tools(self, it: Interaction, servers: Any, limit: float | None) -> None:
        """The tools of this run: the task's and its plain toolsets' ``@vf.tool`` methods (in this
        process), the harness's own, and the MCP tools of the task's ``vf.Toolset`` servers
        (started for this rollout) and of the run's shared ones."""
        from verifiers.v1.mcp.toolset import Toolset

        task, trace, harness = it.task, it.trace, self.harness
        try:
            declared = list(task.toolsets(task.config))
        except Exception as exc:
            trace.record_error(ToolsetError(f"Task.toolsets(): {type(exc).__name__}: {exc}"))
            return
        own = [t for t in declared if isinstance(t, Toolset)]
        tools: dict[str, Any] = tool_functions(task, *(t for t in declared if not isinstance(t, Toolset)))
        if harness.runs_in_process():
            tools.update(harness.extra_tools(it.runtime))  # type: ignore[attr-defined]
        shared = self.run_ctx.toolsets
        try:
            if own or (shared is not None and shared.declared()):
                # a program harness may take them too: the shared chat program (CHAT_PROGRAM_SOURCE)
                # runs our loop, which offers them; a program of its own is refused at its launch
                if not harness.SUPPORTS_MCP:
                    raise ToolsetError(f"harness {harness.config.id!r} does not take MCP toolsets (SUPPORTS_MCP is False)")
                async with asyncio.timeout(limit):
                    connections = await shared.connections() if shared is not None else []
                    await servers.open(own, connections, runtime=it.runtime, task=task.data, reserved=set(tools))
                tools.update(servers.tools)
                it.mcp_tools = bool(servers.tools)
        except TimeoutError:
            trace.record_timeout("setup")
        except ToolsetError as exc:
            trace.record_error(exc)
        for name in harness.config.disabled_tools or ():
            tools.pop(name, None)
        it.tools = tools

    async def _stage(
        self, trace: Trace, stage: str, fn: Callable[[], Any], limit: float | None, what: str, error: type[RolloutError] = TaskError,
    ) -> None:  # fmt: skip
        """One stage's hook under its deadline: past it, a ``<stage>`` timeout; a failure is
        recorded as the original's boundary words it (``TaskError "task setup: KeyError: ..."``,
        ``HarnessError "harness setup: ..."``; a rollout error as it was raised)."""
        deadline = asyncio.timeout(limit)
        owner = asyncio.current_task()
        try:
            async with deadline:
                await fn()
        except BaseException as exc:
            if not env_raised(exc, owner):
                raise
            if isinstance(exc, TimeoutError) and deadline.expired():
                trace.record_timeout(stage)
            else:
                trace.record_error(crossed(what, exc, error))

    async def _play(self, it: Interaction) -> list[Any]:
        """One turn of the harness: the in-process loop, or the program through the proxy."""
        harness = self.harness
        if harness.runs_in_process():
            available = {"trace": it.trace, "runtime": it.runtime, "state": it.trace.state, "task": it.task.data}
            return await chat_loop(it.ctx, it.messages, it.tools, tool_timeout=harness.config.tool_timeout, available=available,
                                   compaction=getattr(harness.config, "compaction", None))  # fmt: skip
        proxy: InterceptionServer | None = await self.run_ctx.proxy() if self.run_ctx.proxy is not None else None
        if proxy is None:
            raise HarnessError(f"harness {harness.config.id!r} runs a program, and this run has no interception proxy")
        endpoint: str | None = proxy.register(it.ctx) if it.session is None else None
        token = launching(it)  # a launch through the shared chat program runs the loop with its tools
        it.ctx.gates_tools = False  # a program runs its own tools: a denied call stops the rollout
        it.launched = False
        try:
            # as the original: the task's data, its prompt as written on the first turn (the text
            # the task's request hooks may have rewritten), the conversation so far on a later one;
            # never the system message the interaction put first (``resolve_prompt`` places it)
            messages = list(it.messages)
            if it.system_added and messages and isinstance(messages[0], SystemMessage):
                messages = messages[1:]
            prompt: Any = messages
            if it.opening and isinstance(it.task.data.prompt, str):
                last = messages[-1] if messages else None
                prompt = content_text(last.content) if isinstance(last, UserMessage) else it.task.data.prompt
            data = it.task.data.model_copy(update={"prompt": prompt})
            # the program's one network grant (a sandbox's agent phase has no other)
            if it.runtime is None:
                raise HarnessError(f"harness {harness.config.id!r} has no runtime to run in")
            if harness.drives_sessions():
                # one session for every turn: its endpoint lives until the run ends
                # (``_close_session``), since its program may live across turns; the route to it
                # is granted before each turn (a box shared with other runs may have lost it)
                first = it.session is None
                if first:
                    it.session_endpoint, endpoint = endpoint, None
                assert it.session_endpoint is not None
                await it.runtime.prepare_execution([it.session_endpoint])
                if first:
                    it.session = await harness.session(it.ctx, it.trace, it.runtime, it.runtime.host_url(it.session_endpoint),
                                                       it.ctx.secret or "", {}, data)  # fmt: skip
                # the task's own prompt opens with a launch; an exchange the env opens (no task
                # prompt) and every later turn go on with the caller's new messages (``resume``)
                opening = first and it.task.data.prompt is not None
                result = await it.session.turn(None if opening else list(it.messages[it.turn_start:]))
            else:
                await it.runtime.prepare_execution([endpoint])
                inside = it.runtime.host_url(endpoint)
                try:
                    result = await harness.launch(it.ctx, it.trace, it.runtime, inside, it.ctx.secret or "", {}, data)
                finally:
                    if not it.borrowed:  # a box shared with other runs keeps its grant for them
                        await it.runtime.prepare_execution(None)
        finally:
            done_launching(token)
            if endpoint is not None and endpoint != it.session_endpoint:
                proxy.unregister(endpoint)
            it.ctx.gates_tools = harness.IN_PROCESS
        if result is not None and not result.ok and not (it.trace.is_completed and not it.trace.errors):
            # (a program that exits on the refusal of a call after a stop or max_turns ended the
            # rollout is not a failure, as in the original)
            raise HarnessError(f"harness {harness.config.id!r} exited {result.returncode}: {result.stderr.strip()[-500:]}")
        if it.launched:  # the shared chat program kept the conversation, as the in-process loop does
            return list(it.messages)
        if it.mcp_tools:
            raise HarnessError(MCP_NEEDS_OUR_LOOP.format(harness=harness.config.id))
        # a program's turn: the conversation is the program's, as the trace's path now holds it (a
        # program may rewrite its history: the path is what it sent last, and what it was answered)
        return list(it.trace.messages) if it.trace.nodes else list(it.messages)


MCP_NEEDS_OUR_LOOP = (
    "harness {harness!r} ran a program of its own, and this task's MCP toolsets reach only our chat loop here "
    "(the null and bash harnesses, or launch_chat_program with CHAT_PROGRAM_SOURCE); programs get no MCP config"
)

AgentT = TypeVar("AgentT", bound=Agent, default=Agent)


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj``'s class (or the instance itself) replaces ``base``'s ``name``."""
    return getattr(type(obj), name, None) is not getattr(base, name) or name in getattr(obj, "__dict__", {})


def make_agent(config: AgentConfig, *, name: str = "agent", harness: Harness | None = None, run_ctx: RunContext) -> Agent:
    return Agent(config, name=name, harness=harness, run_ctx=run_ctx)


class Agents(Generic[AgentT]):
    """An episode's agents by role name (``agents.solver``); each is made on first use."""

    def __init__(self, config: Any, make: Callable[[str, AgentConfig], AgentT]) -> None:
        self._specs = {k: v for k, v in (agent_config_fields(config) if not isinstance(config, dict) else config).items()}
        self._make = make
        self._agents: dict[str, AgentT] = {}

    def __getattr__(self, name: str) -> AgentT:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._agents:
            if name not in self._specs:
                raise AttributeError(f"no agent role {name!r} (roles: {', '.join(sorted(self._specs)) or 'none'})")
            self._agents[name] = self._make(name, self._specs[name])
        return self._agents[name]

    def __getitem__(self, name: str) -> AgentT:
        return self.__getattr__(name)

    def __iter__(self) -> Any:
        return iter(self._specs)


def agent_config_fields(config: Any) -> dict[str, AgentConfig]:
    """The roles of an env config: its ``AgentConfig`` fields, by name."""
    out = {}
    for name in type(config).model_fields:
        value = getattr(config, name, None)
        if isinstance(value, AgentConfig):
            out[name] = value
    return out

"""Harnesses: the program an agent's model runs in. ``[env.<role>.harness]``, narrowed by ``id``.

A harness is a plugin (``Harness[MyConfig]`` exported from a package's ``__all__``, loaded by id
like a taskset; built-ins live in ``verifiers.v1.harnesses``). ``setup(runtime)`` prepares the
runtime once per rollout, ``launch(...)`` runs the program to completion; its model traffic goes
to ``endpoint`` (the interception proxy), never straight to the model.

Built in and runnable: ``null`` (a chat loop in this process that still takes the task's
``@vf.tool`` tools), ``bash`` (``null`` plus ``bash`` / ``edit`` tools run in the runtime) and
``mini_swe_agent`` (the real mini-swe-agent program from its tool folder, in the ``sandbox``
runtime, its model calls through the interception proxy). The other external agent programs'
configs load, and starting one is refused with one line.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import os
from abc import ABC
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, get_args, get_origin, get_type_hints

from pydantic import ConfigDict, Field, FiniteFloat
from typing_extensions import TypeVar

from verifiers.engine.threads import call_sync
from verifiers.errors import env_raised
from verifiers.v1.configs import BaseConfig
from verifiers.v1.decorators import discover_decorated
from verifiers.v1.errors import HarnessError, ProviderError, ToolsetError
from verifiers.v1.messages import capped_tool_output
from verifiers.v1.plugins import (
    PluginError,
    concrete_type,
    import_plugin,
    plugin_class,
    register_config,
    register_resolver,
)
from verifiers.v1.task import SkillSource
from verifiers.v1.types import (
    AssistantMessage,
    Message,
    Tool,
    ToolMessage,
    content_text,
)

if TYPE_CHECKING:
    from verifiers.v1.interception import CallContext
    from verifiers.v1.runtimes import ProgramResult, Runtime
    from verifiers.v1.task import TaskData

EXTERNAL_HARNESSES = (
    "claude_code", "codex", "terminus_2", "openclaw", "pi", "kimi_code", "hermes_agent",
    "prime_agent", "browser_use", "rlm",
)  # fmt: skip
"""The original's external agent programs: their configs load; starting one is refused."""


class HarnessConfig(BaseConfig):
    """``[env.<role>.harness]``: the harness's id and its knobs (a subclass adds them)."""

    id: str = "null"
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the harness program."""
    forward_env: list[str] = Field(default_factory=list)
    mcp_header_env: dict[str, dict[str, str]] = Field(default_factory=dict)
    """MCP headers by server name, read from host variables (the original's key, for agent programs
    that speak ACP; they are refused here, so it loads and is unused)."""
    tool_timeout: FiniteFloat = Field(600.0, gt=0)
    """Seconds one tool call may take."""
    disabled_tools: list[str] | None = None
    skills: list[SkillSource] = Field(default_factory=list)
    """Skill folders for a harness whose program discovers them (``SUPPORTS_SKILLS``); refused at
    start on any other harness, as in the original."""

    @property
    def name(self) -> str:
        return self.id

    @property
    def resolved_env(self) -> dict[str, str]:
        """The program's environment: the ``forward_env`` names the host has, then ``env``."""
        forwarded = {k: os.environ[k] for k in self.forward_env if k in os.environ}
        return {**forwarded, **self.env}


ConfigT = TypeVar("ConfigT", bound=HarnessConfig, default=HarnessConfig)


class Harness(ABC, Generic[ConfigT]):
    """The program an agent's model runs in."""

    APPENDS_SYSTEM_PROMPT: ClassVar[bool] = False
    SUPPORTS_MCP: ClassVar[bool] = False
    SUPPORTS_TOOL_INTERCEPTION: ClassVar[bool] = False
    SUPPORTS_RESUME: ClassVar[bool] = False
    SUPPORTS_SKILLS: ClassVar[bool] = False
    EXECUTES_CODE: ClassVar[bool] = True
    NEEDS_CONTAINER: ClassVar[bool] = True
    IN_PROCESS: ClassVar[bool] = False
    """A loop run in this process (``null``, ``bash``): its calls go straight to
    :func:`~verifiers.v1.interception.model_call`, the function behind the proxy."""

    def __init__(self, config: ConfigT) -> None:
        self.config = config

    @classmethod
    def config_type(cls) -> type[HarnessConfig]:
        return concrete_type(cls, HarnessConfig) or HarnessConfig

    def refusal(self, runtime_type: str) -> str | None:
        """Why this harness cannot start in a ``runtime_type`` runtime (None: it can)."""
        if self.config.skills and not self.SUPPORTS_SKILLS:
            return f"harness {self.config.id!r} does not install skills, and `skills` is set; remove it or use a harness that discovers skills"
        if self.NEEDS_CONTAINER and runtime_type == "subprocess":
            return (
                f"harness {self.config.id!r} runs an agent program that must be isolated; "
                'set [env.<role>.runtime] type = "sandbox" (bubblewrap, no Docker needed) or a container runtime'
            )
        return None

    def system_prompt(self, task_prompt: str | None) -> str | None:
        """The system prompt the model gets: the task's, unless the harness frames it."""
        return task_prompt

    def resolve_prompt(self, task: Any) -> tuple[str | None, Any]:
        """``(system prompt, prompt)`` for a program launched on ``task`` (a ``TaskData``): the
        system prompt apart when the harness sends it as a system message
        (``APPENDS_SYSTEM_PROMPT``), else folded ahead of a text prompt."""
        prompt, system = task.prompt, task.system_prompt
        if system is None or self.APPENDS_SYSTEM_PROMPT:
            return (system if self.APPENDS_SYSTEM_PROMPT else None), prompt
        if not isinstance(prompt, str):
            raise TypeError(
                f"harness {self.config.id!r} cannot fold a system prompt into a {'message list' if prompt is not None else 'missing'} "
                "prompt; set APPENDS_SYSTEM_PROMPT to send it as a system message"
            )
        return None, f"{system}\n\n{prompt}"

    def runs_in_process(self) -> bool:
        """Whether the agent runs this harness's chat loop itself (``IN_PROCESS``, and ``launch``
        not replaced by a subclass: a replaced one is run, as the original runs it)."""
        return self.IN_PROCESS and getattr(type(self).launch, "in_process_launch", False)

    def has_metrics(self) -> bool:
        return bool(discover_decorated(self, "metric"))

    async def score(self, trace: Any, runtime: Runtime | None) -> None:
        """The harness's own ``@vf.metric`` methods over a finished run (they may read what its
        program left in ``runtime``), beside the task's scoring; a failure is a ``HarnessError``."""
        from verifiers.v1.scoring import score_harness

        await score_harness(self, trace, runtime)

    async def setup(self, runtime: Runtime) -> None:
        """Prepare ``runtime`` for this harness (install the program); once per rollout."""

    async def launch(
        self, ctx: CallContext, trace: Any, runtime: Runtime, endpoint: str, secret: str,
        mcp_urls: dict[str, str], data: TaskData,
    ) -> ProgramResult:  # fmt: skip
        """Run the program to completion; its model calls go to ``endpoint`` (bearer ``secret``)."""
        raise HarnessError(f"harness {self.config.id!r} has no launch()")

    launch.in_process_launch = True  # type: ignore[attr-defined]  # an IN_PROCESS harness that keeps it runs the loop

    async def resume(
        self, ctx: CallContext, trace: Any, runtime: Runtime, endpoint: str, secret: str,
        mcp_urls: dict[str, str], data: TaskData, messages: Any, tool_interception_url: str | None = None,
    ) -> ProgramResult:  # fmt: skip
        """A turn of a run with the caller's new ``messages``: a later turn, or the first one of an
        exchange the env opens itself (a task without a prompt). By default the program is
        launched again on the whole conversation (the trace's path so far, then ``messages``), for
        a harness that can take a conversation as its prompt (``SUPPORTS_RESUME``); a harness whose
        program keeps its state between turns overrides it."""
        if not self.SUPPORTS_RESUME:
            raise HarnessError(f"harness {self.config.id!r} cannot continue an exchange: it neither overrides resume() nor "
                               "takes the conversation as its prompt (SUPPORTS_RESUME)")  # fmt: skip
        # the system prompt is placed again from ``data`` by the launch (``resolve_prompt``): the
        # trace's copy is left out then, while one a message-list prompt carried itself is kept
        keep_system = data.system_prompt is None
        path = [m for m in trace.messages if keep_system or m.role != "system"] if trace.nodes else []
        return await self.launch(ctx, trace, runtime, endpoint, secret, mcp_urls,
                                 data.model_copy(update={"prompt": [*path, *messages]}))  # fmt: skip

    async def session(
        self, ctx: CallContext, trace: Any, runtime: Runtime, endpoint: str, secret: str,
        mcp_urls: dict[str, str], data: TaskData, tool_interception_url: str | None = None,
    ) -> HarnessSession:  # fmt: skip
        """The handle that drives this harness through one run's turns. A harness whose program
        lives across turns (a process, a connection) returns its own ``HarnessSession`` subclass."""
        return HarnessSession(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)

    def drives_sessions(self) -> bool:
        """Whether this harness is written for the session contract (it replaces ``session`` or
        ``resume``): an agent then keeps one session for all the turns of an interaction, its
        endpoint served until the interaction ends, instead of launching the program per turn."""
        base = Harness
        return any(getattr(type(self), n) is not getattr(base, n) for n in ("session", "resume"))


class HarnessSession:
    """One run's handle on its harness across the turns of an interaction.

    The base session adapts ``launch`` and ``resume``: its first ``turn()`` launches the program,
    each later ``turn(messages)`` resumes it with the caller's new messages. A harness whose program
    keeps state between turns returns its own subclass from ``Harness.session`` and overrides
    ``_run`` (and ``close``, to release what it holds). ``turn`` returns the program's result (None
    from a subclass that returns none); the agent records a failed one on the trace."""

    def __init__(
        self, harness: Harness, ctx: CallContext, trace: Any, runtime: Runtime, endpoint: str, secret: str,
        mcp_urls: dict[str, str], data: TaskData, tool_interception_url: str | None = None,
    ) -> None:  # fmt: skip
        self.harness = harness
        self.ctx = ctx
        self.trace = trace
        self.runtime = runtime
        self.endpoint = endpoint
        self.secret = secret
        self.mcp_urls = mcp_urls
        self.data = data
        self.tool_interception_url = tool_interception_url
        self._closed = False

    async def steer(self, message: str, *, message_id: str | None = None) -> dict[str, Any]:
        """Hand the program a user message while its turn runs (a harness that supports it)."""
        raise NotImplementedError(f"harness {self.harness.config.id!r} does not support steering")

    async def turn(self, messages: Any = None) -> ProgramResult | None:
        """One turn of the run: the first (``messages`` None) launches the program."""
        if self._closed:
            raise HarnessError(f"harness {self.harness.config.id!r} session is already closed")
        return await self._run(messages)

    async def _run(self, messages: Any) -> ProgramResult | None:
        h = self.harness
        if messages is None:
            return await h.launch(self.ctx, self.trace, self.runtime, self.endpoint, self.secret, self.mcp_urls, self.data)
        return await h.resume(self.ctx, self.trace, self.runtime, self.endpoint, self.secret, self.mcp_urls, self.data,
                              messages, self.tool_interception_url)  # fmt: skip

    async def close(self) -> None:
        """Release what the session holds (idempotent); later turns are refused."""
        self._closed = True


_INTERACTION: contextvars.ContextVar[Any] = contextvars.ContextVar("vf_interaction", default=None)


def current_interaction() -> Any:
    """The interaction whose harness ``launch`` is running (its tools, task and messages)."""
    return _INTERACTION.get()


def launching(interaction: Any) -> contextvars.Token[Any]:
    """Mark ``interaction`` as the one whose ``launch`` runs now; ``done_launching(token)`` ends it."""
    return _INTERACTION.set(interaction)


def done_launching(token: contextvars.Token[Any]) -> None:
    _INTERACTION.reset(token)


# --- tools ---------------------------------------------------------------------------------------


def tool_functions(*owners: Any) -> dict[str, Callable[..., Any]]:
    """The ``@vf.tool`` methods of ``owners`` (a task, its toolsets) by tool name."""
    out: dict[str, Callable[..., Any]] = {}
    for owner in owners:
        for fn in discover_decorated(owner, "tool"):
            out[getattr(fn, "tool_name", None) or fn.__name__] = fn
    return out


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def tool_schema(name: str, fn: Callable[..., Any]) -> Tool:
    """A tool's schema from its signature (annotated parameters) and docstring."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    props: dict[str, Any] = {}
    required = []
    for pname, param in inspect.signature(fn).parameters.items():
        if pname in ("self", "trace", "runtime", "state", "task") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(pname, str)
        described = None
        if get_origin(hint) is Annotated:  # Annotated[str, "what it is"] (or a Field(description=...))
            hint, *extras = get_args(hint)
            described = next((x if isinstance(x, str) else x.description for x in extras
                              if isinstance(x, str) or isinstance(getattr(x, "description", None), str)), None)  # fmt: skip
        props[pname] = {"type": _JSON_TYPES.get(getattr(hint, "__origin__", hint), "string")}
        if described:
            props[pname]["description"] = described
        if param.default is param.empty:
            required.append(pname)
    doc = (fn.__doc__ or "").strip()  # as written, inner indentation kept (the original's description)
    return Tool(name=name, description=doc, parameters={"type": "object", "properties": props, "required": required})


MAX_TOOL_ERRORS = 100
"""Failed tool calls kept in ``trace.info["tool_errors"]`` (the model read every one)."""


async def call_tool(fn: Callable[..., Any], arguments: str, available: dict[str, Any], timeout: float, name: str = "") -> tuple[str, bool]:
    """Run one in-process tool call: (its text, whether it failed). A failure is text the model
    reads; a call past ``timeout`` is a :class:`ToolsetError` (the rollout's recorded error)."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("the arguments are not a JSON object")
    except ValueError as exc:
        return f"invalid arguments ({exc})", True
    params = inspect.signature(fn).parameters
    for key in ("trace", "runtime", "state", "task"):
        if key in params and key in available:
            args[key] = available[key]
    owner = asyncio.current_task()
    try:
        if inspect.iscoroutinefunction(fn):
            async with asyncio.timeout(timeout):  # in this task: no task per tool call
                result = await fn(**args)
        else:
            # the lane of sync environment code: one call at a time, timed from its start
            result = await call_sync(fn, (), args, timeout=timeout, off_main=True)
    except TimeoutError:
        raise ToolsetError(f"tool {name or fn.__name__!r} did not finish within {timeout:g} s") from None
    except TypeError as exc:
        return str(exc), True
    except BaseException as exc:  # a tool's own SystemExit or GeneratorExit is its error, not the run's end
        if not env_raised(exc, owner):
            raise
        return f"{type(exc).__name__}: {exc}", True
    return (result if isinstance(result, str) else json.dumps(result, default=str)), False


def _note_tool_error(trace: Any, tool: str, message: str) -> None:
    errors = trace.info.setdefault("tool_errors", [])
    if isinstance(errors, list) and len(errors) < MAX_TOOL_ERRORS:
        errors.append({"tool": tool, "message": message[:2000]})


async def chat_loop(
    ctx: CallContext, messages: list[Message], tools: dict[str, Any], *, tool_timeout: float,
    available: dict[str, Any], compaction: Any = None,
) -> list[Message]:  # fmt: skip
    """The null harness's loop: call the model, run its tool calls, until it answers without any
    (or a stop ends the rollout). Returns the conversation with the new messages appended.

    ``tools`` maps a name to an in-process function or an MCP tool
    (:class:`~verifiers.v1.mcp.client.RemoteTool`). A failed call is text the model reads,
    noted in ``trace.info["tool_errors"]``; a call past ``tool_timeout`` or a tool server that is
    gone is recorded on the trace as a ``ToolsetError`` and ends the rollout (the run goes on).

    ``compaction`` (a :class:`~verifiers.v1.compaction.CompactionConfig`, the ``bash`` harness's)
    resets a conversation that nears the context window to a hand-off summary; without it, a
    request the provider refuses as too long ends the loop with the conversation so far."""
    from verifiers.v1.compaction import (
        Compactor,
        compactable,
        discover_threshold,
        estimated_tokens,
        is_context_overflow,
    )
    from verifiers.v1.interception import Stopped, model_call
    from verifiers.v1.mcp.client import RemoteTool

    schemas = [fn.schema if isinstance(fn, RemoteTool) else tool_schema(n, fn) for n, fn in tools.items()] or None
    convo = list(messages)
    trace = ctx.trace
    compactor = None
    if compaction is not None:
        compactor = Compactor(compaction.summarize_at_tokens or await discover_threshold(ctx), convo)
    while True:
        try:
            response = await model_call(ctx, convo, schemas)
        except Stopped:
            return convo
        except ProviderError as exc:
            if not is_context_overflow(exc):
                raise
            if compactor is None or not compactor.active:
                return convo  # a full context is the run's budget spent: it ends with what it has
            if not compactable(convo):
                if compactor.compacted:
                    raise compactor.failed("the compacted conversation still does not fit the context") from None
                raise
            response = None
        if compactor is not None and compactor.active:
            if response is not None and not compactor.reached(response):
                compactor.last_good = len(convo)  # it fitted with the reserve to spare
            elif response is None or (response.finish_reason == "length" and compactable(convo)):
                cut, asked = response, ctx.prompt  # the reply cut by its length at the threshold, and its request
                try:
                    convo = await compactor.compact(ctx, convo, schemas)
                except Stopped:
                    if cut is not None:  # the run ends on the reply it had
                        convo = list(asked) if asked is not None else convo
                        convo.append(cut.message)
                    return convo
                try:
                    response = await model_call(ctx, convo, schemas)
                except Stopped:
                    return convo
                except ProviderError as exc:
                    if is_context_overflow(exc):
                        raise compactor.failed("the rebuilt conversation still does not fit the context") from None
                    raise
        if ctx.prompt is not None:
            convo = list(ctx.prompt)  # the prompt as the task's request hooks left it
        convo.append(response.message)
        calls = response.message.tool_calls or []
        if not calls or trace.is_completed:
            return convo  # no calls, or a stop refused the reply's calls: none of them runs
        denied = ctx.policy_state.denied if ctx.policy_state is not None else {}
        results_from = len(convo)
        for call in calls:
            verdict = denied.get(call.id)
            if verdict is not None:  # a request hook denied the call: the model reads its verdict
                convo.append(verdict)
                continue
            fn = tools.get(call.name)
            try:
                if fn is None:
                    text, failed = f"no tool named {call.name!r}", True
                elif isinstance(fn, RemoteTool):
                    text, failed = await fn(call.arguments, trace.state, tool_timeout)
                else:
                    text, failed = await call_tool(fn, call.arguments, available, tool_timeout, call.name)
            except ToolsetError as exc:
                convo.append(ToolMessage(tool_call_id=call.id, content=f"error: {exc}", name=call.name))
                trace.record_error(exc)
                return convo
            if failed:
                text = content_text(text)
                _note_tool_error(trace, call.name, text)
                if not isinstance(fn, RemoteTool):  # an MCP tool's error text reaches the model as the server wrote it
                    text = f"error: {text}"
            convo.append(ToolMessage(tool_call_id=call.id, content=capped_tool_output(text), name=call.name))
        if compactor is not None and compactor.active and not trace.is_completed:
            results = sum(estimated_tokens(content_text(m.content)) for m in convo[results_from:])
            if compactor.reached(response, results) and compactable(convo):
                try:
                    convo = await compactor.compact(ctx, convo, schemas)
                except Stopped:
                    return convo


def last_reply(messages: list[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, AssistantMessage):
            return m.content or ""
    return ""


# --- loading by id -------------------------------------------------------------------------------


class ExternalHarnessConfig(HarnessConfig):
    """An external agent program's config: its knobs are kept as given until it runs here."""

    model_config = ConfigDict(extra="allow")


class ExternalHarness(Harness[ExternalHarnessConfig]):
    def refusal(self, runtime_type: str) -> str | None:
        return (
            f"harness {self.config.id!r} is an external agent program, which this version does not run yet "
            "(use the null or bash harness)"
        )


def _normal(harness_id: str) -> str:
    return harness_id.replace("-", "_").lower()


def harness_class(harness_id: str) -> type[Harness]:
    if _normal(harness_id) in EXTERNAL_HARNESSES:
        return ExternalHarness
    return plugin_class(import_plugin(harness_id, "harness"), Harness, "harness")


def harness_config_type(harness_id: str) -> type[HarnessConfig]:
    return harness_class(harness_id).config_type()


def default_agent_harness(taskset_id: str) -> HarnessConfig:
    """The harness config a role that names none runs (``default_harness_id``): the taskset
    package's own harness when it exports one, else ``null`` (the original's default is ``bash``)."""
    ident = default_harness_id(taskset_id)
    return harness_config_type(ident).model_validate({"id": ident})


def import_harness(harness_id: str) -> Any:
    return import_plugin(harness_id, "harness")


register_resolver("harness", harness_config_type)


def load_harness(config: HarnessConfig | dict[str, Any] | str) -> Harness:
    """The harness ``config`` names, its config narrowed to the harness's own class."""
    if isinstance(config, str):
        config = {"id": config}
    if isinstance(config, HarnessConfig):
        config = config.model_dump(exclude_unset=True) | {"id": config.id}
    ident = str(config.get("id") or "null")
    cls = harness_class(ident)
    try:
        narrowed = cls.config_type().model_validate({**config, "id": ident})
    except Exception as exc:
        raise PluginError(f"harness {ident!r} config: {exc}") from None
    return cls(narrowed)


def default_harness_id(taskset_id: str | None = None) -> str:
    """The harness a role without one runs: the taskset package's own when its ``__all__`` exports a
    ``Harness`` subclass (as the original does), else ``null`` (the original's is ``bash``; ours keeps
    the default from executing model-written commands on the host: ask for ``bash`` by name)."""
    if not taskset_id:
        return "null"
    try:
        module = import_plugin(taskset_id, "taskset")
    except (ImportError, PluginError):
        return "null"
    names = getattr(module, "__all__", None) or ()
    if any(isinstance(obj, type) and issubclass(obj, Harness) and obj is not Harness
           for obj in (getattr(module, n, None) for n in names)):  # fmt: skip
        return taskset_id
    return "null"


for _name in EXTERNAL_HARNESSES:
    register_config("harness", _name, ExternalHarnessConfig)
    register_config("harness", _name.replace("_", "-"), ExternalHarnessConfig)

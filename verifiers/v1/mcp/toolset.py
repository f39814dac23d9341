"""``vf.Toolset[Config, State]``: ``@vf.tool`` methods served to the model as an MCP server.

A toolset is constructed in the run's process with its config (``SearchToolset(config.tools)``),
but its tools run in a child process started for it (``python -m verifiers.v1.mcp``), which
imports the class by its module and name, builds it from the config's JSON, runs ``setup()``
(and, for a per-rollout server, ``setup_task(task)``) and serves ``register(mcp)``'s tools with
the ``mcp`` package's FastMCP over stdio. The class must therefore live at module level of an
importable module; ``MyToolset.run()`` under ``if __name__ == "__main__"`` serves it the same way.

Per-rollout ``State``: every call carries the calling rollout's ``trace.state`` (the fields the
toolset's State class declares) in the request's ``_meta``; the tool reads and changes
``self.state``, and the result's ``_meta`` carries it back to the trace. A context variable keeps
concurrent calls from different rollouts on one shared server apart. Base ``State`` (no fields of
its own) is not sent.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic

from pydantic import field_validator
from typing_extensions import TypeVar

from verifiers.v1.configs import BaseConfig
from verifiers.v1.decorators import discover_decorated
from verifiers.v1.fields import AS_ANY
from verifiers.v1.plugins import concrete_type
from verifiers.v1.runtimes import RuntimeConfig, SubprocessConfig, resolve_runtime_config
from verifiers.v1.state import State, StateT

if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP

STATE_META_KEY = "verifiers/state"
"""The ``_meta`` key of a tool call (and of its result) that carries the rollout's state."""
STATE_EXCLUDE = frozenset({"artifacts"})
"""State fields that stay on the host: artifacts are bytes the runtime collects, not tool state."""

# the child's environment: what to serve, built from what, for which task
ENV_TOOLSET = "VF_TOOLSET"
ENV_CONFIG = "VF_CONFIG"
ENV_TASK = "VF_TASK"


class ToolsetConfig(BaseConfig):
    """A per-rollout toolset's config (returned by ``Task.toolsets``): one server per rollout."""

    colocated: bool = False
    """Run the server in the rollout's own runtime (its working folder), to see the harness's files."""
    runtime: Annotated[RuntimeConfig, AS_ANY] = SubprocessConfig()
    """Where the server runs when not colocated (a fresh subprocess runtime of its own)."""
    url: str | None = None
    """An MCP server already running at this URL (streamable HTTP; a path ending in ``/sse``:
    SSE): nothing is launched, and no state is sent to it."""

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> Any:
        return resolve_runtime_config(value)


class SharedToolsetConfig(BaseConfig):
    """A shared toolset's config (returned by ``Taskset.toolsets``): one server per worker
    process for the whole run; each call still sees its own rollout's ``State``."""

    runtime: Annotated[RuntimeConfig, AS_ANY] = SubprocessConfig()
    url: str | None = None

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> Any:
        return resolve_runtime_config(value)


ConfigT = TypeVar("ConfigT", bound=BaseConfig, default=ToolsetConfig)

_call_state: contextvars.ContextVar[State | None] = contextvars.ContextVar("vf_toolset_state", default=None)


class Toolset(Generic[ConfigT, StateT]):
    """Tools served over MCP: ``@vf.tool`` methods (their names, prefixed ``<server_name>_``)."""

    TOOL_PREFIX: ClassVar[str | None] = ""
    """The prefix of this server's tool names: "" (the default) is the class name in snake case,
    None offers the tools bare (then name clashes across servers are refused)."""

    def __init__(self, config: ConfigT) -> None:
        self.config = config
        self._inert_state: StateT = type(self).state_type()()  # type: ignore[assignment]

    @classmethod
    def config_type(cls) -> type[BaseConfig]:
        found = concrete_type(cls, BaseConfig)
        if found is None:
            raise TypeError(f"{cls.__name__} must name its config class, e.g. Toolset[vf.ToolsetConfig]")
        return found

    @classmethod
    def state_type(cls) -> type[State]:
        return concrete_type(cls, State) or State

    @property
    def state(self) -> StateT:
        """The calling rollout's state during a tool call (a throwaway one outside a call)."""
        current = _call_state.get()
        return current if current is not None else self._inert_state  # type: ignore[return-value]

    @property
    def server_name(self) -> str:
        if self.TOOL_PREFIX is None:
            return ""
        return self.TOOL_PREFIX or re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()

    async def setup(self) -> None:
        """Prepare the server (load a corpus, open an index); once per server process."""

    async def setup_task(self, task: Any) -> None:
        """Prepare for one task (its ``TaskData``); called on per-rollout servers only."""

    def register(self, mcp: FastMCP) -> None:
        """Add this server's tools to ``mcp`` (a FastMCP server): by default the ``@vf.tool``
        methods, their parameters and docstrings as the schema. Override to add others."""
        for fn in discover_decorated(self, "tool"):
            # the description is the docstring as written (inner indentation kept), as the original's
            mcp.add_tool(_threaded(fn), name=getattr(fn, "tool_name", None) or fn.__name__, description=(fn.__doc__ or "").strip() or None)

    @classmethod
    def run(cls) -> None:
        """Serve this toolset over stdio (the config from ``VF_CONFIG``, else its defaults)."""
        serve(cls)


def _threaded(fn: Any) -> Any:
    """A sync tool runs in the lane of sync environment code (``engine/threads.py``): off the event
    loop, so one slow call does not stall the other rollouts' calls on a shared server, and one at a
    time, as the original runs it. The context (the calling rollout's state) goes with it."""
    if inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        from verifiers.engine.threads import call_sync

        return await call_sync(fn, args, kwargs, off_main=True)

    # FastMCP reads the parameters off the signature; evaluate the tool's own annotations here
    call.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return call


def import_ref(ref: str) -> Any:
    """``package.module:Qual.Name`` -> the object."""
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def class_ref(cls: type) -> str | None:
    """``module:qualname`` of a class a child process can import, else None."""
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return None
    return f"{cls.__module__}:{cls.__qualname__}"


# --- the server process --------------------------------------------------------------------------


def _die_with_parent() -> None:
    """On Linux, the server dies with the process that started it (even a SIGKILLed one)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass


def serve(cls: type[Toolset]) -> None:
    """Build ``cls`` from ``VF_CONFIG`` and serve it over stdio until stdin closes."""
    _die_with_parent()
    raw = os.environ.get(ENV_CONFIG)
    config_cls = cls.config_type()
    config = config_cls.model_validate_json(raw) if raw else config_cls()
    # the protocol owns the real stdout: a tool's print() goes to stderr instead of corrupting it
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from verifiers.engine.threads import run_on_main_thread

    toolset = cls(config)
    run_on_main_thread(lambda: _serve(toolset, protocol_out))  # as every server of ours: the lane on the main thread


async def _serve(toolset: Toolset, protocol_out: Any) -> None:
    from io import TextIOWrapper

    import anyio
    from mcp.server.stdio import stdio_server

    await toolset.setup()
    task = os.environ.get(ENV_TASK)
    if task and type(toolset).setup_task is not Toolset.setup_task:
        spec = json.loads(task)
        await toolset.setup_task(import_ref(spec["cls"]).model_validate_json(spec["data"]))
    server = _server_for(toolset)
    toolset.register(server)
    stdout = anyio.wrap_file(TextIOWrapper(protocol_out, encoding="utf-8"))
    async with stdio_server(stdout=stdout) as (read, write):
        await server._mcp_server.run(read, write, server._mcp_server.create_initialization_options())


def _server_for(toolset: Toolset) -> FastMCP:
    """A FastMCP server whose every tool call runs with the calling rollout's state."""
    from mcp.server.fastmcp import FastMCP
    from mcp.server.fastmcp.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent

    state_cls = type(toolset).state_type()
    fields = [f for f in state_cls.model_fields if f not in STATE_EXCLUDE]

    class StatefulServer(FastMCP):
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
            meta = self.get_context().request_context.meta
            sent = getattr(meta, "model_extra", None) or {}
            if STATE_META_KEY not in sent:
                return self._checked(name, await super().call_tool(name, arguments))
            given = sent[STATE_META_KEY] if isinstance(sent[STATE_META_KEY], dict) else {}
            state = state_cls.model_validate({k: given[k] for k in fields if k in given})
            token = _call_state.set(state)
            try:
                try:
                    result = await super().call_tool(name, arguments)
                except ToolError as exc:
                    # the model reads it; as in the original, a tool that raised sends no state
                    # back: what it changed before raising is dropped, the rollout's state stays
                    return CallToolResult(content=[TextContent(type="text", text=str(exc))], isError=True)
            finally:
                _call_state.reset(token)
            if isinstance(result, CallToolResult):  # a tool that built its own result
                return result.model_copy(update={"meta": {**(result.meta or {}), **_state_meta(state)}})
            content, structured = result if isinstance(result, tuple) else (result, None)
            if isinstance(content, dict):
                content, structured = [TextContent(type="text", text=json.dumps(content))], content
            return CallToolResult(content=list(content), structuredContent=structured, _meta=_state_meta(state))

        def _checked(self, name: str, result: Any) -> Any:
            """What the SDK's low-level server makes of a FastMCP result (its output normalization and
            output-schema check, with the same error results), except that each tool's schema is
            checked against the metaschema once, not on every call as its ``jsonschema.validate``
            does. A result of another shape goes back as it came, for the SDK to handle."""
            if isinstance(result, CallToolResult):
                return result  # the SDK passes a built result through unchecked
            if isinstance(result, tuple) and len(result) == 2:
                content, structured = result
            elif isinstance(result, dict):
                content, structured = [TextContent(type="text", text=json.dumps(result, indent=2))], result
            elif hasattr(result, "__iter__"):
                content, structured = result, None
            else:
                return result
            tool = self._tool_manager.get_tool(name)
            schema = tool.output_schema if tool is not None else None
            if schema is not None:
                if structured is None:
                    return _error("Output validation error: outputSchema defined but no structured output returned")
                from jsonschema import exceptions, validators

                cached = checked.get(name)
                if cached is None or cached[0] is not schema:
                    cls = validators.validator_for(schema)
                    cls.check_schema(schema)  # a SchemaError is the SDK's error result, as before
                    cached = checked[name] = (schema, cls(schema))
                error = exceptions.best_match(cached[1].iter_errors(structured))
                if error is not None:
                    return _error(f"Output validation error: {error.message}")
            return CallToolResult(content=list(content), structuredContent=structured, isError=False)

    checked: dict[str, tuple[Any, Any]] = {}  # tool name -> (its output schema, that schema's validator)

    def _error(message: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=message)], isError=True)

    def _state_meta(state: State) -> dict[str, Any]:
        return {STATE_META_KEY: state.model_dump(mode="json", exclude=set(STATE_EXCLUDE))}

    return StatefulServer(toolset.server_name or type(toolset).__name__, log_level="WARNING")

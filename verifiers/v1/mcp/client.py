"""The host side of toolsets: MCP client sessions to the tool servers a rollout calls.

* :class:`Connection`: one MCP client session (stdio to a server we started, or streamable HTTP /
  SSE to a ``url``), opened and closed in a task of its own: the SDK's anyio scopes must enter and
  exit in one task, while tool calls come from whichever task runs the rollout.
* :class:`ToolServers`: one rollout's servers: its task's toolsets (started for it, closed when
  the rollout ends, on every path) and the run's shared ones; its ``tools`` are what the harness
  offers the model.
* :class:`SharedToolsets`: the taskset's toolsets, one server each for the whole run (started on
  first use, closed by the run).

A launched server is ``python -m verifiers.v1.mcp`` in a process group of its own; closing
its session closes its stdin, then SIGTERM / SIGKILL the group (the SDK's stdio shutdown), and the
server also dies with this process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from verifiers.utils.async_utils import wait_for
from verifiers.v1.errors import ToolsetError
from verifiers.v1.mcp.toolset import (
    ENV_CONFIG,
    ENV_TASK,
    ENV_TOOLSET,
    STATE_EXCLUDE,
    STATE_META_KEY,
    Toolset,
    class_ref,
)
from verifiers.v1.state import State
from verifiers.v1.types import ImageUrlContentPart, ImageUrlSource, MessageContent, TextContentPart, Tool

if TYPE_CHECKING:
    from verifiers.v1.task import TaskData

MISSING_MCP = "MCP toolsets need the mcp package: pip install 'verifiers[compat]'"
START_TIMEOUT = 180.0  # seconds: interpreter start, imports and the toolset's own setup()
CLOSE_TIMEOUT = 10.0  # seconds: the SDK's stdio shutdown takes up to ~4 (stdin EOF, TERM, KILL)
MAX_TOOL_PAGES = 100  # a server that pages its tool list forever is refused
LOG_TAIL = 2000  # characters of a failed server's stderr in its error


def require_mcp() -> None:
    """The SDK's client modules, imported (about a second, the first time); else one clear error."""
    try:
        import mcp.client.sse
        import mcp.client.stdio
        import mcp.client.streamable_http  # noqa: F401
    except ImportError:
        raise ToolsetError(MISSING_MCP) from None


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    return f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__


async def finish(aw: Any) -> None:
    """Await ``aw`` to its end even if the caller is cancelled meanwhile (then re-raise)."""
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise


class Connection:
    """One MCP client session to one server, named ``name`` (the tools' prefix)."""

    def __init__(self, name: str, open_transport: Callable[[], Any], *, state_type: type[State] | None = None,
                 log: Any = None, on_close: Callable[[], Any] | None = None) -> None:  # fmt: skip
        self.name = name
        self.tools: list[Any] = []
        self._open = open_transport
        self._state_type = state_type if state_type is not None and state_type is not State else None
        self._log = log
        self._tail = ""
        self._on_close = on_close
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    @property
    def stateful(self) -> bool:
        """Whether calls carry the rollout's state (a launched server with a State of its own)."""
        return self._state_type is not None

    def log_tail(self) -> str:
        """The end of the server's stderr (kept after it is closed)."""
        return self._read_tail(self._log) if self._log is not None else self._tail

    @staticmethod
    def _read_tail(log: Any) -> str:
        with contextlib.suppress(Exception):
            fd = log.fileno()
            size = os.fstat(fd).st_size
            return os.pread(fd, LOG_TAIL, max(0, size - LOG_TAIL)).decode(errors="replace").strip()
        return ""

    async def start(self, timeout: float = START_TIMEOUT) -> Connection:
        """Open the session and list the server's tools; on any failure (a cancel included)
        the server is closed before this returns."""
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(ready), name=f"mcp:{self.name}")
        try:
            self._session, self.tools = await wait_for(asyncio.shield(ready), timeout)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                await finish(self.close())
                raise
            what = f"did not start within {timeout:g} s" if isinstance(exc, TimeoutError) else f"failed to start ({_describe(exc)})"
            await finish(self.close())  # the server is gone now: its stderr is complete
            raise self._failure(what) from None
        return self

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._open())
                session = await stack.enter_async_context(_session_type()(streams[0], streams[1]))
                await session.initialize()
                tools = await _list_tools(session)
                ready.set_result((session, tools))
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ToolsetError(_describe(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None

    async def call(self, tool: str, arguments: dict[str, Any], *, state: State | None, timeout: float) -> tuple[MessageContent, bool]:
        """Call ``tool``; (its content: text, or text and image parts; whether the server reported
        it failed). A call past ``timeout`` or a server that is gone is a :class:`ToolsetError`."""
        from mcp.shared.exceptions import McpError
        from mcp.types import CONNECTION_CLOSED

        session = self._session
        if session is None:
            raise self._failure("is not running")
        meta = None
        if self.stateful and state is not None:
            try:
                meta = {STATE_META_KEY: state.model_dump(mode="json", exclude=set(STATE_EXCLUDE))}
            except Exception as exc:
                raise ToolsetError(f"the rollout's {type(state).__name__} cannot be sent to tool server {self.name!r} as JSON: {exc}") from None
        try:
            # the limit in this task: no task per tool call (wait_for would make one)
            async with asyncio.timeout(timeout):
                result = await session.call_tool(tool, arguments, meta=meta)
        except TimeoutError:
            raise ToolsetError(f"tool {self.qualified(tool)!r} did not finish within {timeout:g} s") from None
        except McpError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                raise self._failure(f"closed the connection during {tool!r}") from None
            return f"{exc.error.message}", True  # a protocol-level refusal (bad arguments): the model's to read
        except Exception as exc:
            raise self._failure(f"failed during {tool!r} ({_describe(exc)})") from None
        if self.stateful and state is not None and result.meta:
            _apply_state(state, result.meta.get(STATE_META_KEY), self.name)
        return tool_content(result.content), bool(result.isError)

    def qualified(self, tool: str) -> str:
        return f"{self.name}_{tool}" if self.name else tool

    async def close(self) -> None:
        """End the session (and the server we started); bounded, and safe to call twice."""
        task, self._task = self._task, None
        if task is not None:
            self._closing.set()
            done, _ = await asyncio.wait([task], timeout=CLOSE_TIMEOUT)
            if not done:  # the SDK's shutdown hung: cancelling the owner kills the process group
                task.cancel()
                await asyncio.wait([task], timeout=CLOSE_TIMEOUT)
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            with contextlib.suppress(Exception):
                await on_close()
        log, self._log = self._log, None
        if log is not None:
            self._tail = self._read_tail(log)
            log.close()

    def _failure(self, what: str) -> ToolsetError:
        tail = self.log_tail()
        return ToolsetError(f"tool server {self.name!r} {what}" + (f"; its stderr ends:\n{tail}" if tail else ""))


async def _list_tools(session: Any) -> list[Any]:
    tools, cursor, seen = [], None, set()
    for _ in range(MAX_TOOL_PAGES):
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.nextCursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise ToolsetError("the server's tool list repeats a page cursor")
        seen.add(cursor)
    raise ToolsetError(f"the server's tool list runs past {MAX_TOOL_PAGES} pages")


def _apply_state(state: State, returned: Any, server: str) -> None:
    """Write the fields a server sent back into the rollout's state, in place."""
    if not isinstance(returned, dict):
        return
    fields = type(state).model_fields
    known = {k: v for k, v in returned.items() if k in fields and k not in STATE_EXCLUDE}
    if not known:
        return
    try:
        fresh = type(state).model_validate({**state.model_dump(exclude=set(STATE_EXCLUDE)), **known})
    except Exception as exc:
        raise ToolsetError(f"tool server {server!r} sent back a state that is not a {type(state).__name__}: {exc}") from None
    for name in known:
        setattr(state, name, getattr(fresh, name))


MAX_TOOL_IMAGE_CHARS = 32 * 2**20
"""Base64 characters of one image a tool result may carry to the model (a larger one is a marker)."""


def tool_content(blocks: list[Any]) -> MessageContent:
    """An MCP result's content as a tool message's: its text, or, when the result holds an image,
    text and ``image_url`` parts (a ``data:`` URL) in the result's order, as the original does. A
    result with no content at all (a tool that returned None) reads ``[]``, as the original writes it."""
    if not blocks:
        return "[]"
    if not any(getattr(b, "type", None) == "image" and len(b.data) <= MAX_TOOL_IMAGE_CHARS for b in blocks):
        return content_text(blocks)
    parts: list[Any] = []
    for block in blocks:
        if getattr(block, "type", None) == "image" and len(block.data) <= MAX_TOOL_IMAGE_CHARS:
            parts.append(ImageUrlContentPart(image_url=ImageUrlSource(url=f"data:{block.mimeType};base64,{block.data}")))
        elif text := content_text([block]):
            parts.append(TextContentPart(text=text))
    return parts


def content_text(blocks: list[Any]) -> str:
    """An MCP result's content as text (an image or audio block is a marker of its type and size)."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mimeType}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource":
            parts.append(getattr(block.resource, "text", None) or f"[resource {block.resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(str(block))
    return "\n".join(parts)


# --- opening servers -----------------------------------------------------------------------------


def remote(name: str, url: str) -> Connection:
    """A connection to an MCP server already running at ``url`` (a path ending in ``/sse``: SSE,
    else streamable HTTP). Nothing is launched and no state is sent."""
    require_mcp()
    scheme = urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ToolsetError(f"toolset {name!r} url must be http(s), not {url!r}")

    def open_transport() -> Any:
        if urlsplit(url).path.rstrip("/").endswith("/sse"):
            from mcp.client.sse import sse_client

            return sse_client(url)
        from mcp.client.streamable_http import streamable_http_client

        return streamable_http_client(url)

    return Connection(name, open_transport)


def launched(toolset: Toolset, *, cwd: str, env: dict[str, str], task: TaskData | None = None,
             on_close: Callable[[], Any] | None = None) -> Connection:  # fmt: skip
    """A connection to ``toolset`` served by a child process started in ``cwd``."""
    require_mcp()
    from mcp.client.stdio import StdioServerParameters, stdio_client

    cls = type(toolset)
    ref = class_ref(cls)
    if ref is None:
        raise ToolsetError(f"toolset {cls.__qualname__} must be a module-level class of an importable module (its server process imports it)")
    try:
        cls.config_type()
    except TypeError as exc:
        raise ToolsetError(str(exc)) from None
    child = {**env, ENV_TOOLSET: ref, ENV_CONFIG: toolset.config.model_dump_json(), ENV_TASK: ""}
    # the server imports what this process imports (a taskset found on a path added at run time)
    # (absolute: the server runs in another folder)
    paths = [os.path.abspath(p) for p in sys.path] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    child["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if task is not None and type(toolset).setup_task is not Toolset.setup_task:
        data_ref = class_ref(type(task))
        if data_ref is None:
            raise ToolsetError(f"toolset {cls.__qualname__} has setup_task, and its task data class {type(task).__qualname__} is not importable")
        child[ENV_TASK] = json.dumps({"cls": data_ref, "data": task.model_dump_json()})
    params = StdioServerParameters(command=sys.executable, args=["-m", "verifiers.v1.mcp"], env=child, cwd=cwd)
    log = tempfile.TemporaryFile()  # the server's stderr, read back when it fails
    return Connection(toolset.server_name, lambda: stdio_client(params, errlog=log), state_type=cls.state_type(), log=log, on_close=on_close)


async def open_toolset(toolset: Toolset, *, colocated_in: Any = None, task: TaskData | None = None) -> Connection:
    """Start (or reach) one toolset's server: its ``url``; else colocated in ``colocated_in`` (the
    rollout's runtime) when its config says so; else in a fresh subprocess runtime of its own.
    A server runs as a local process, so any other runtime is refused, never run unisolated."""
    from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime

    if not isinstance(toolset, Toolset):
        raise ToolsetError(f"{type(toolset).__name__} is not a vf.Toolset")
    if "mcp.client.streamable_http" not in sys.modules:
        await asyncio.to_thread(require_mcp)  # off the event loop: the other rollouts go on meanwhile
    name, cfg = toolset.server_name or type(toolset).__name__, toolset.config
    url = getattr(cfg, "url", None)
    if url:
        return await remote(toolset.server_name, url).start()
    if getattr(cfg, "colocated", False) and colocated_in is not None:
        if not isinstance(colocated_in, SubprocessRuntime):
            kind = getattr(colocated_in.config, "type", type(colocated_in).__name__)
            raise ToolsetError(f"toolset {name!r} is colocated, and this rollout's runtime is {kind!r}: "
                               "colocated servers run only beside a subprocess runtime here")  # fmt: skip
        cwd, env, stop = str(colocated_in.workdir), {**os.environ, **colocated_in.config.env}, None
    else:
        runtime_cfg = getattr(cfg, "runtime", None) or SubprocessConfig()
        if not isinstance(runtime_cfg, SubprocessConfig):
            raise ToolsetError(f"toolset {name!r}: its runtime type {runtime_cfg.type!r} is not supported for tool servers here (use \"subprocess\")")
        runtime = SubprocessRuntime(runtime_cfg)
        await runtime.start()
        cwd, env, stop = str(runtime.workdir), {**os.environ, **runtime_cfg.env}, runtime.stop
    try:
        conn = launched(toolset, cwd=cwd, env=env, task=task, on_close=stop)
    except BaseException:
        if stop is not None:
            await stop()
        raise
    return await conn.start()


@dataclass
class RemoteTool:
    """One MCP tool as the harness offers it: its schema under the qualified name."""

    connection: Connection
    name: str
    schema: Tool

    async def __call__(self, arguments: str, state: State | None, timeout: float) -> tuple[MessageContent, bool]:
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"invalid arguments ({exc})", True
        if not isinstance(args, dict):
            return "invalid arguments (not a JSON object)", True
        return await self.connection.call(self.name, args, state=state, timeout=timeout)


def offered(connections: list[Connection], reserved: set[str] = frozenset()) -> dict[str, RemoteTool]:  # type: ignore[assignment]
    """The tools of ``connections`` by qualified name; a clash is refused."""
    out: dict[str, RemoteTool] = {}
    for conn in connections:
        for tool in conn.tools:
            full = conn.qualified(tool.name)
            if full in out or full in reserved:
                raise ToolsetError(f"two tools are named {full!r}; give a toolset a distinct TOOL_PREFIX")
            schema = Tool(name=full, description=tool.description or "", parameters=dict(tool.inputSchema or {"type": "object"}))
            out[full] = RemoteTool(conn, tool.name, schema)
    return out


class ToolServers:
    """One rollout's MCP servers: its own (closed by :meth:`close`) and the run's shared ones."""

    def __init__(self) -> None:
        self.own: list[Connection] = []
        self.tools: dict[str, RemoteTool] = {}

    async def open(self, toolsets: list[Toolset], shared: list[Connection], *, runtime: Any, task: TaskData,
                   reserved: set[str]) -> None:  # fmt: skip
        """Start ``toolsets`` for this rollout, one after another, then offer their tools beside
        the shared servers'. Those started stay in ``own`` whatever fails: :meth:`close` ends them."""
        for toolset in toolsets:
            self.own.append(await open_toolset(toolset, colocated_in=runtime, task=task))
        self.tools = offered([*shared, *self.own], reserved)

    async def close(self) -> None:
        own, self.own = self.own, []
        self.tools = {}
        await asyncio.gather(*(c.close() for c in own), return_exceptions=True)


class SharedToolsets:
    """The taskset's toolsets for a whole run: started once on first use (a failure is kept and
    given to every rollout), closed by :meth:`close` at the run's end."""

    def __init__(self, make: Callable[[], list[Any]]) -> None:
        self._make = make
        self._declared: list[Any] | None = None
        self._lock = asyncio.Lock()
        self._connections: list[Connection] | None = None
        self._error: ToolsetError | None = None
        self._closed = False

    def declared(self) -> list[Any]:
        """The toolsets (built once); a taskset whose ``toolsets()`` raises is a ToolsetError."""
        if self._declared is None:
            try:
                self._declared = list(self._make())
            except Exception as exc:
                self._error = ToolsetError(f"Taskset.toolsets(): {type(exc).__name__}: {exc}")
                self._declared = []
        if self._error is not None:
            raise self._error
        return self._declared

    async def connections(self) -> list[Connection]:
        async with self._lock:
            if self._closed:
                raise ToolsetError("the run's shared toolsets are closed")
            if self._error is not None:
                raise self._error
            if self._connections is None:
                started: list[Connection] = []
                try:
                    for toolset in self.declared():
                        started.append(await open_toolset(toolset))
                except ToolsetError as exc:
                    self._error = exc
                    await asyncio.gather(*(c.close() for c in started), return_exceptions=True)
                    raise
                except BaseException:
                    await asyncio.gather(*(c.close() for c in started), return_exceptions=True)
                    raise
                self._connections = started
            return self._connections

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            connections, self._connections = self._connections or [], None
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


_SESSION: type | None = None


def _session_type() -> type:
    """The SDK's ``ClientSession`` with each tool's output-schema validator built once.

    The SDK validates every structured tool result with ``jsonschema.validate``, which checks the
    schema against its metaschema on every call (most of a tool call's client-side cost). Here the
    schema is checked once per schema the server listed (a relisted tool's new schema is checked
    again), and every result is still validated against it, with the SDK's errors: a result that
    does not match, a missing structured content, a schema that is invalid or has a ``$ref`` that
    does not resolve within itself are each a ``RuntimeError`` as before."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    from mcp import ClientSession

    class CachedValidatorSession(ClientSession):
        _vf_validators: dict[str, tuple[Any, Any]]

        async def _validate_tool_result(self, name: str, result: Any) -> None:
            schemas = getattr(self, "_tool_output_schemas", None)
            if not isinstance(schemas, dict):  # not the SDK this was written against: its own check
                return await super()._validate_tool_result(name, result)
            if name not in schemas:
                await self.list_tools()  # the SDK's refresh of its schema cache
            schema = schemas.get(name)
            if schema is None:  # no output schema, or a tool the server did not list
                return await super()._validate_tool_result(name, result)
            if result.structuredContent is None:
                raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")
            from jsonschema import SchemaError, ValidationError, exceptions, validators
            from referencing import Registry
            from referencing.exceptions import Unresolvable

            cache = self.__dict__.setdefault("_vf_validators", {})
            cached = cache.get(name)
            if cached is None or cached[0] is not schema:
                cls = validators.validator_for(schema)
                try:
                    cls.check_schema(schema)
                except SchemaError as e:
                    raise RuntimeError(f"Invalid schema for tool {name}: {e}") from None
                # an explicit empty registry, as the SDK: $refs resolve within the schema document
                cached = cache[name] = (schema, cls(schema, registry=Registry()))
            try:
                error = exceptions.best_match(cached[1].iter_errors(result.structuredContent))
            except Unresolvable as e:
                raise RuntimeError(f"Invalid schema for tool {name}: {e}") from e
            if error is not None:
                if isinstance(error, ValidationError):
                    raise RuntimeError(f"Invalid structured content returned by tool {name}: {error}")
                raise error

    _SESSION = CachedValidatorSession
    return _SESSION

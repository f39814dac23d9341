"""Traces over the env-server wire: msgpack frames, and traces streamed as deltas.

A served run sends each trace as it grows: its header once (``open``), then only what changed
— new items of the append-only lists, new semantic links of nodes already sent, scalar fields
whose value changed (``set``), and the preview of the request in flight (``pending``). The
reply that ends the run carries the episode without its traces (``head``) and, per trace, the
counts the client's assembly must match. The delta keys and shapes are the original 0.4.0's,
so either side may be the original.

The msgpack codecs (ormsgpack to pack, msgspec to unpack) are imported on first use, not with this module.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from verifiers.v1.types import SamplingConfig

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

logger = logging.getLogger(__name__)

HEADER_FIELDS = ("version", "id", "verifiers", "task")
LIST_FIELDS = ("nodes", "calls", "errors", "extra_usage", "request_rewrites", "response_rewrites")
SCALAR_FIELDS = (
    "agent", "tools", "mm_token_type_id_map", "rewards", "metrics", "info", "root_reply", "is_completed", "ok",
    "stop_condition", "is_timeout", "timing", "num_input_tokens", "num_output_tokens", "num_total_tokens",
)  # fmt: skip


# runtime types whose config the original 0.4.0 reads with no extra keys: what of ours it knows
_ORIGINAL_RUNTIME_KEYS = {"subprocess": ("type",)}
_RUNTIME_INFO_KEYS = ("id", "borrowed")


def wire_agent(agent: dict[str, Any]) -> dict[str, Any]:
    """A trace's dumped ``agent`` as the original reads it: a runtime config (and the runtime's
    info) of a type it knows keeps only the keys it knows (our subprocess runtime's ``workdir``,
    a folder on the server, and its ``env`` stay home)."""
    config = agent.get("config") or {}
    runtime, info = config.get("runtime"), agent.get("runtime")
    if isinstance(runtime, dict) and runtime.get("type") in _ORIGINAL_RUNTIME_KEYS:
        config = {**config, "runtime": {k: runtime[k] for k in _ORIGINAL_RUNTIME_KEYS[runtime["type"]] if k in runtime}}
        agent = {**agent, "config": config}
    if isinstance(info, dict) and info.get("type") in _ORIGINAL_RUNTIME_KEYS:
        keys = (*_ORIGINAL_RUNTIME_KEYS[info["type"]], *_RUNTIME_INFO_KEYS)
        agent = {**agent, "runtime": {k: info[k] for k in keys if k in info}}
    return agent


def _default(obj: Any) -> Any:
    # called only for what msgpack cannot pack itself (it walks lists and dicts in C)
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="python")
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(obj)


_DECODER: list[Any] = []


def pack(payload: Any) -> bytes:
    import ormsgpack

    # ormsgpack and msgspec, chosen by measurement (benchmarks/serve.py --codecs): the msgpack
    # library's bytes (str as str, bytes as bin, int-keyed maps, datetimes as ISO text as the
    # original sends them: msgspec would write msgpack timestamps), several times faster
    return ormsgpack.packb(payload, default=_default, option=ormsgpack.OPT_NON_STR_KEYS)


def unpack(data: bytes) -> Any:
    if not _DECODER:
        import msgspec

        _DECODER.append(msgspec.msgpack.Decoder())
    # the fastest decoder measured, and a strict one (trailing bytes are an error); node-keyed
    # maps (links) keep their int keys
    return _DECODER[0].decode(data)


def dump(model: BaseModel, **kwargs: Any) -> dict[str, Any]:
    """The wire dict of ``model``: its runtime type's fields (a task's own data fields survive)."""
    return model.model_dump(mode="python", serialize_as_any=True, **kwargs)


class TraceSummary(BaseModel):
    """A finished trace's identity and size, checked against the client's assembly."""

    id: str
    nodes: int
    calls: int


class BaseRequest(BaseModel):
    """A request frame's payload; its ``method`` travels as its own route frame."""

    method: ClassVar[str]


class BaseResponse(BaseModel):
    success: bool = True
    error: str | None = None


class HealthRequest(BaseRequest):
    method: ClassVar[str] = "health"


class HealthResponse(BaseResponse):
    pass


class CancelRequest(BaseRequest):
    """Abort a run in flight by its wire ``request_id`` (a finished or unknown one: ``cancelled=False``)."""

    method: ClassVar[str] = "cancel"
    request_id: str


class CancelResponse(BaseResponse):
    cancelled: bool = False


class RunRequest(BaseRequest):
    """One rollout: the task's dumped data (the server validates it into the taskset's own
    type), the client to call, the model and its sampling."""

    method: ClassVar[str] = "run"
    task_data: dict[str, Any]
    client: dict[str, Any]
    """The client config as the original sends it (typed by the client layer)."""
    model: str
    sampling: SamplingConfig = SamplingConfig()


class RunResponse(BaseResponse):
    """The end of a run whose traces already streamed as deltas."""

    head: dict[str, Any] | None = None
    """The episode without its traces (its id, env, errors)."""
    traces: list[TraceSummary] = Field(default_factory=list)


class _Cursor:
    def __init__(self) -> None:
        self.sent = dict.fromkeys(LIST_FIELDS, 0)
        self.links: list[int] = []
        self.scalars: dict[str, bytes] = {}
        self.pending: bytes = pack([])


def trace_deltas(traces: Iterable[Trace], cursors: dict[str, _Cursor]) -> list[tuple[str, dict[str, Any], _Cursor | None]]:
    """Each trace's delta against what ``cursors`` say was sent, with the cursor to keep once
    it is sent (None: the trace was dropped, forget it). Commits nothing."""
    traces = list(traces)
    live = {t.id for t in traces}
    out: list[tuple[str, dict[str, Any], _Cursor | None]] = [
        (tid, {"trace": tid, "discard": True}, None) for tid in cursors if tid not in live
    ]
    for trace in traces:
        delta: dict[str, Any] = {"trace": trace.id}
        sent = cursors.get(trace.id)
        cursor = copy.deepcopy(sent) if sent is not None else _Cursor()
        if sent is None:
            delta["open"] = dump(trace, include=set(HEADER_FIELDS))
        links: dict[int, list[dict[str, Any]]] = {}
        for index in range(cursor.sent["nodes"]):
            node_links = trace.nodes[index].semantic_parents
            if len(node_links) > cursor.links[index]:
                links[index] = [dump(link) for link in node_links[cursor.links[index] :]]
                cursor.links[index] = len(node_links)
        if links:
            delta["links"] = links
        for field in LIST_FIELDS:
            items = getattr(trace, field)
            n = cursor.sent[field]
            if len(items) > n:
                delta[field] = [dump(item) for item in items[n:]]
                cursor.sent[field] = len(items)
                if field == "nodes":
                    cursor.links.extend(len(node.semantic_parents) for node in items[n:])
        changed = {}
        for field, value in dump(trace, include=set(SCALAR_FIELDS)).items():
            if field == "agent":
                value = wire_agent(value)
            packed = pack(value)
            if cursor.scalars.get(field) != packed:
                cursor.scalars[field] = packed
                changed[field] = value
        if changed:
            delta["set"] = changed
        pending = [dump(m) for m in trace.pending]
        packed = pack(pending)
        if packed != cursor.pending:
            cursor.pending = packed
            if pending or "nodes" not in delta:  # new nodes clear the client's preview anyway
                delta["pending"] = pending
        if len(delta) > 1:
            out.append((trace.id, delta, cursor))
    return out


class DeltaStreamer:
    """Sends the live traces' changes, one flush per burst of ``Trace.notify`` calls.

    A cursor moves only once its delta was sent, so a failed send is diffed again next time."""

    def __init__(self, traces: Callable[[], Iterable[Trace]], send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.traces = traces
        self.send = send
        self.cursors: dict[str, _Cursor] = {}
        self._scheduled: asyncio.Handle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> DeltaStreamer:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        if exc_type is None:
            await asyncio.gather(*self._flushes, return_exceptions=True)
            await self.flush()
        else:
            for task in self._flushes:
                task.cancel()
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def watch(self, trace: Trace) -> None:
        trace.watch(self._changed)
        self._changed(trace)

    def _changed(self, trace: Trace) -> None:
        if self._scheduled is None:
            self._scheduled = asyncio.get_running_loop().call_soon(self._start_flush)

    def _start_flush(self) -> None:
        self._scheduled = None
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    def diff(self) -> list[tuple[str, dict[str, Any], _Cursor | None]]:
        """The deltas a flush would send now (nothing is committed)."""
        return trace_deltas(self.traces(), self.cursors)

    async def flush(self) -> None:
        async with self._lock:  # deltas leave in diff order
            for trace_id, delta, cursor in self.diff():
                try:
                    await self.send(delta)
                except Exception as exc:  # e.g. the pool went away (EHOSTUNREACH): one line, no traceback
                    logger.warning("failed to send the delta of trace %s (%s: %s); it is sent again next flush",
                                   trace_id, type(exc).__name__, exc)
                    continue
                if cursor is None:
                    self.cursors.pop(trace_id, None)
                else:
                    self.cursors[trace_id] = cursor


class EpisodeAssembly:
    """The client side: deltas applied into raw trace dicts, validated once at the end."""

    def __init__(self) -> None:
        self.traces: dict[str, dict[str, Any]] = {}

    def apply(self, delta: dict[str, Any]) -> None:
        trace_id = delta["trace"]
        if delta.get("discard"):
            self.traces.pop(trace_id, None)
            return
        trace = self.traces.get(trace_id)
        if trace is None:
            if "open" not in delta:
                raise ValueError(f"delta for trace {trace_id} before its header")
            trace = self.traces[trace_id] = {**delta["open"], **{f: [] for f in LIST_FIELDS}, "pending": []}
        for index, links in (delta.get("links") or {}).items():
            trace["nodes"][int(index)]["semantic_parents"].extend(links)
        for index, row in (delta.get("routing_repairs") or {}).items():
            import numpy as np

            from verifiers.v1.graph import decode_ndarray, encode_ndarray

            node = trace["nodes"][int(index)]
            node["routed_experts"] = encode_ndarray(np.concatenate([decode_ndarray(node["routed_experts"])[:-1], decode_ndarray(row)]))
        if "nodes" in delta:
            # copied: a later links delta grows semantic_parents in place, the caller's delta stays as sent
            trace["nodes"].extend({**n, "semantic_parents": list(n.get("semantic_parents") or [])} for n in delta["nodes"])
            trace["pending"] = []
        for field in LIST_FIELDS:
            if field != "nodes" and field in delta:
                trace[field].extend(delta[field])
        trace.update(delta.get("set") or {})
        if "pending" in delta:
            trace["pending"] = delta["pending"]

    def finish(self, head: dict[str, Any], summaries: list[TraceSummary]) -> dict[str, Any]:
        """The whole episode record; a trace the deltas did not build completely is an error."""
        traces = []
        for s in summaries:
            trace = self.traces.get(s.id)
            if trace is None:
                raise RuntimeError(f"served episode is missing trace {s.id}")
            if len(trace["nodes"]) != s.nodes or len(trace["calls"]) != s.calls:
                raise RuntimeError(
                    f"served trace {s.id} assembled {len(trace['nodes'])} nodes / {len(trace['calls'])} calls, "
                    f"server reports {s.nodes} / {s.calls}"
                )
            traces.append({k: v for k, v in trace.items() if k != "pending"})
        return {**head, "traces": traces}

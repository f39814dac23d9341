"""The trace: everything one agent did on one task, and how it scored.

Its serialized form is the original 0.4.0 wire's, field for field (``WireTrace`` reads a record
without the run's packages; ``tests/v1/test_wire_compat.py`` loads ours in the original and
theirs here).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)
from typing_extensions import TypeVar

from verifiers.v1 import graph
from verifiers.v1.configs import WireAgentConfig
from verifiers.v1.errors import ProviderError, stop_condition
from verifiers.v1.fields import new_id
from verifiers.v1.graph import RECORD_FLOAT_DECIMALS, MessageNode, SemanticEdgeSet
from verifiers.v1.state import State, StateT
from verifiers.v1.task import DataT, Task, WireTaskData
from verifiers.v1.types import (
    AssistantMessage,
    FinishReason,
    InterceptRecord,
    Message,
    Messages,
    Response,
    Sampling,
    Tool,
    ToolMessage,
    Usage,
    content_text,
)

TRACE_VERSION = 1

EXCLUDE_FIELDS: dict[str, Any] = {"nodes": {"__all__": {"routed_experts", "sampling_mask"}}}
"""Raw tensors: on the msgpack wire, not in JSON records."""

TOKEN_PREFIX_KEY = "token_prefix"
"""``info[TOKEN_PREFIX_KEY]``: ``{"extended": n, "split": n}``, the turns that continued a conversation
with prompt ids made to extend its tokens (``verifiers.v1.prefix``), and those whose tokens broke it."""

TRUNCATING_STOPS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed")


class TimeSpan(BaseModel):
    start: float = 0.0
    end: float = 0.0

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start) if self.end else 0.0


class TimeSplit(BaseModel):
    duration: float = 0.0


class AgentSpan(TimeSpan):
    model: TimeSplit = Field(default_factory=TimeSplit)
    harness: TimeSplit = Field(default_factory=TimeSplit)


class Timing(BaseModel):
    start: float = Field(default_factory=time.time)
    boot: TimeSpan = Field(default_factory=TimeSpan)
    setup: TimeSpan = Field(default_factory=TimeSpan)
    agent: AgentSpan = Field(default_factory=AgentSpan)
    finalize: TimeSpan = Field(default_factory=TimeSpan)
    scoring: TimeSpan = Field(default_factory=TimeSpan)


class Error(BaseModel):
    type: str
    message: str
    status_code: int | None = None
    traceback: str | None = None


class VersionInfo(BaseModel):
    version: str
    commit: str | None = None


def _this_build() -> VersionInfo:
    import verifiers

    return VersionInfo(version=verifiers.__version__)


AgentConfigT = TypeVar("AgentConfigT", bound=BaseModel, default=WireAgentConfig)


class AgentInfo(BaseModel, Generic[AgentConfigT]):
    config: AgentConfigT
    runtime: dict[str, Any] | None = None
    """The box the rollout ran in (its runtime's description); None until provisioned."""
    name: str = "agent"
    trainable: bool = True

    @field_validator("config", mode="wrap")
    @classmethod
    def _role_config(cls, value: Any, handler: Any) -> Any:
        """A role's live config (an ``AgentConfig``, as the original's records hold and trainers'
        tests build them) is recorded as its wire form when the record's type is that."""
        try:
            return handler(value)
        except ValidationError:
            wire = getattr(value, "wire", None)
            if isinstance(value, BaseModel) and callable(wire):
                return handler(wire())
            raise


class TraceTask(BaseModel, Generic[DataT]):
    type: str
    data: DataT
    key: str | None = None
    hash: str | None = None

    @classmethod
    def of(cls, task: Any) -> TraceTask:
        """``task`` (a ``Task``) as a trace records it: its type, data, key and hash (the data
        hashed once: the key is the hash unless the task's class defines its own)."""
        digest = task.hash
        key = digest if type(task).key is Task.key and type(task).hash is Task.hash else task.key
        return cls(type=type(task).__name__, data=task.data, key=key, hash=digest)


class Reward(BaseModel):
    score: float
    weight: float = 1.0

    @property
    def value(self) -> float:
        return self.score * self.weight


class PolicyEvent(BaseModel):
    code: str
    paths: list[str]


class ACPInfo(BaseModel):
    request_id: str = Field(pattern=r"^[A-Za-z0-9._:-]{1,128}$")


class ModelCall(BaseModel):
    node: int | None = None
    """Index into ``Trace.nodes`` of the assistant message this call produced."""
    model: str | None = None
    sampling: Sampling | None = None
    endpoint: str | None = None
    finish_reason: FinishReason = None
    usage: Usage | None = None
    time: TimeSpan = Field(default_factory=TimeSpan)
    error: Error | None = None
    policy: PolicyEvent | None = None
    acp: ACPInfo | None = None


CHAT_ENDPOINT = "/chat/completions"
"""``ModelCall.endpoint`` of a chat-completions call: the provider path it went to, as the original
records it."""


def _new_input(calls: Iterable[ModelCall]) -> Iterable[tuple[ModelCall, int]]:
    # each call's prompt beyond the previous call's whole sequence (a lower bound once history is cut)
    prev = 0
    for call in calls:
        if call.usage is None:
            continue
        yield call, max(0, call.usage.input_tokens - prev)
        prev = call.usage.total_tokens


def _count_tokens(nodes: list[MessageNode], calls: list[ModelCall]) -> tuple[int, int, int]:
    """(input, output, total) tokens of a graph's branches (what :attr:`Trace.branches` would
    give, without building them). Input: each branch's :func:`_new_input`, a call on several
    branches (a shared prefix) counted once; output: the completion tokens of each branch's calls
    (``Branch.num_output_tokens``, summed); total: the input plus every call's completion tokens."""
    completion = 0
    by_node: dict[int, ModelCall] = {}  # a node's last call
    for c in calls:
        if c.usage is not None:
            completion += c.usage.completion_tokens
        if c.node is not None:
            by_node[c.node] = c
    new_input = output = 0
    if by_node:
        parents = {n.parent for n in nodes if n.parent is not None}
        seen: set[int] = set()
        for leaf in range(len(nodes)):  # graph.leaves, in order
            if leaf in parents:
                continue
            prev = 0
            for i in graph.path_to(nodes, leaf):
                call = by_node.get(i)
                if call is None or (usage := call.usage) is None:
                    continue
                output += usage.completion_tokens
                if id(call) not in seen:
                    seen.add(id(call))
                    new_input += max(0, usage.input_tokens - prev)
                prev = usage.total_tokens
    return new_input, output, new_input + completion


class Branch(BaseModel):
    """One root-to-leaf path: one training sample."""

    index: int
    nodes: list[MessageNode]
    calls: list[ModelCall] = Field(default_factory=list)
    trainable: bool = True
    mm_token_type_id_map: dict[int, int] = Field(default_factory=dict)

    @property
    def messages(self) -> Messages:
        return [n.message for n in self.nodes]

    @property
    def tools(self) -> list[Tool]:
        return self.nodes[0].tools if self.nodes else []

    @property
    def token_ids(self) -> list[int]:
        out: list[int] = []
        for n in self.nodes:
            out.extend(n.token_ids)
        return out

    @property
    def sampled_mask(self) -> list[bool]:
        out: list[bool] = []
        for n in self.nodes:
            out.extend(n.mask)
        return out

    def spread(self, values: Callable[[MessageNode], list[float] | None]) -> list[float]:
        """A per-sampled-token stream widened to ``token_ids`` (0.0 on unsampled tokens)."""
        out: list[float] = []
        for n in self.nodes:
            vals = values(n) or []
            i = 0
            for sampled in n.mask:
                if sampled:
                    out.append(vals[i] if i < len(vals) else 0.0)
                    i += 1
                else:
                    out.append(0.0)
        return out

    @property
    def logprobs(self) -> list[float]:
        return self.spread(lambda n: n.logprobs)

    @property
    def advantages(self) -> list[float] | None:
        if all(n.advantages is None for n in self.nodes):
            return None
        return self.spread(lambda n: n.advantages)

    def _optional(self, read: Callable[[MessageNode], list[float] | None]) -> list[float] | None:
        # None (never assigned) is not the same as zeros (assigned, no credit)
        if all(read(n) is None for n in self.nodes):
            return None
        return self.spread(read)

    @property
    def reference_logprobs(self) -> list[float] | None:
        return self._optional(lambda n: n.reference_logprobs)

    @property
    def trainer_logprobs(self) -> list[float] | None:
        return self._optional(lambda n: n.trainer_logprobs)

    @property
    def entropies(self) -> list[float] | None:
        return self._optional(lambda n: n.entropies)

    def loss_weights(self, name: str) -> list[float] | None:
        """The loss-weight stream ``name`` aligned to ``token_ids`` (each node's covers its tokens)."""
        if all(n.loss_weights is None or name not in n.loss_weights for n in self.nodes):
            return None
        out: list[float] = []
        for n in self.nodes:
            weights = (n.loss_weights or {}).get(name)
            if weights is None:
                out.extend([0.0] * len(n.token_ids))
            elif len(weights) != len(n.token_ids):
                raise ValueError(f"loss weight stream {name!r} has {len(weights)} values for {len(n.token_ids)} tokens")
            else:
                out.extend(weights)
        return out

    @property
    def mm_token_type_ids(self) -> list[int] | None:
        if not self.mm_token_type_id_map:
            return None
        types = [self.mm_token_type_id_map.get(t, 0) for t in self.token_ids]
        return types if any(types) else None

    @property
    def routed_experts(self) -> Any:
        """uint8 ``[tokens, layers, top_k]`` (numpy) when every node with tokens carries its slice."""
        nodes = [n for n in self.nodes if n.token_ids]
        if not nodes or any(n.routed_experts is None for n in nodes):
            return None
        import numpy as np

        merged = np.concatenate([graph.decode_ndarray(n.routed_experts) for n in nodes], axis=0)
        return merged if merged.shape[0] == len(self.token_ids) else None

    @property
    def sampling_mask(self) -> Any:
        """The sampling masks of the branch's sampled tokens (a ``SamplingMask`` of numpy arrays)."""
        if all(n.sampling_mask is None for n in self.nodes):
            return None
        import numpy as np

        from verifiers.v1.types import SamplingMask

        ids, counts = [], []
        for n in self.nodes:
            c = np.zeros(len(n.mask), dtype=np.int32)
            if n.sampling_mask is not None:
                node_counts = graph.decode_ndarray(n.sampling_mask["counts"])
                if len(node_counts):
                    c[np.nonzero(n.mask)[0]] = node_counts
                    ids.append(graph.decode_ndarray(n.sampling_mask["ids"]))
            counts.append(c)
        flat = np.concatenate(ids).astype(np.int32, copy=False) if ids else np.zeros(0, dtype=np.int32)
        return SamplingMask(ids=flat, counts=np.concatenate(counts))

    @property
    def usage(self) -> Usage | None:
        return Usage.aggregate(c.usage for c in self.calls if c.usage is not None)

    @property
    def last_usage(self) -> Usage | None:
        return next((c.usage for c in reversed(self.calls) if c.usage is not None), None)

    @computed_field
    @property
    def num_total_tokens(self) -> int:
        last = self.last_usage
        return last.total_tokens if last is not None else 0

    @computed_field
    @property
    def num_output_tokens(self) -> int:
        usage = self.usage
        return usage.completion_tokens if usage is not None else 0

    @computed_field
    @property
    def num_input_tokens(self) -> int:
        return sum(n for _, n in _new_input(self.calls))


class Trace(BaseModel, Generic[DataT, StateT, AgentConfigT]):
    version: int = TRACE_VERSION
    id: str = Field(default_factory=new_id)
    verifiers: VersionInfo = Field(default_factory=_this_build)
    task: TraceTask[DataT]
    agent: AgentInfo[AgentConfigT] = Field(default_factory=lambda: AgentInfo(config=WireAgentConfig()))
    tools: list[Tool] = Field(default_factory=list)
    nodes: list[MessageNode] = Field(default_factory=list)
    calls: list[ModelCall] = Field(default_factory=list)
    mm_token_type_id_map: dict[int, int] = Field(default_factory=dict)
    request_rewrites: list[InterceptRecord] = Field(default_factory=list)
    response_rewrites: list[InterceptRecord] = Field(default_factory=list)
    rewards: dict[str, Reward | None] = Field(default_factory=dict)
    """Name -> score and weight; None: expected but not scored (its hook failed or never ran)."""
    metrics: dict[str, float | None] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    root_reply: str | None = None
    state: StateT = Field(default_factory=State, exclude=True)
    extra_usage: list[Usage] = Field(default_factory=list)
    is_completed: bool = False
    ok: bool = False
    stop_condition: str | None = None
    is_timeout: bool = False
    errors: list[Error] = Field(default_factory=list)
    timing: Timing = Field(default_factory=Timing)

    _on_change: Callable[[Trace], None] | None = PrivateAttr(default=None)
    _pending: dict[int, list[Message]] = PrivateAttr(default_factory=dict)
    _last_path: list[int] = PrivateAttr(default_factory=list)
    _reused_prefix_ids: list[int] = PrivateAttr(default_factory=list)
    _token_counts_of: tuple[Any, Any, int, tuple[Any, ...], tuple[int, int, int]] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _graph_is_sound(self) -> Trace:
        # the graph only grows, so a parent is always an earlier node: anything else (a cycle, an
        # index out of range) is a broken record, refused here rather than mis-walked later
        n = len(self.nodes)
        for i, node in enumerate(self.nodes):
            if node.parent is not None and not 0 <= node.parent < i:
                raise ValueError(f"node {i}'s parent {node.parent} is not an earlier node")
            for link in node.semantic_parents:
                if link.node >= n:
                    raise ValueError(f"node {i} links to node {link.node}, past the last node {n - 1}")
        for call in self.calls:
            if call.node is not None and not 0 <= call.node < n:
                raise ValueError(f"a model call points at node {call.node}, past the last node {n - 1}")
        return self

    @classmethod
    def for_task(cls, task: Any, *, record: TraceTask | None = None, **fields: Any) -> Trace:
        """A fresh trace of ``task`` (a ``Task``): its type, data, key and hash recorded (``record``:
        that record, already made for this task), and a fresh state of the class the task declares
        (``Task[Data, MyState]``)."""
        fields.setdefault("state", type(task).state_type()())
        return cls(task=record if record is not None else TraceTask.of(task), **fields)

    @field_serializer("mm_token_type_id_map")
    def _str_keys(self, mapping: dict[int, int]) -> dict[str, int]:
        # msgpack readers refuse int map keys by default; validation turns them back into ints
        return {str(k): v for k, v in mapping.items()} if mapping else {}

    # --- watching (the delta streamer) ------------------------------------------------------

    def watch(self, on_change: Callable[[Trace], None]) -> None:
        self._on_change = on_change

    def notify(self) -> None:
        # the private dict read directly (a private attribute's getattr is slow; every turn notifies)
        on_change = self.__pydantic_private__["_on_change"]
        if on_change is not None:
            on_change(self)

    @property
    def pending(self) -> list[Message]:
        return [m for ms in self._pending.values() for m in ms]

    def preview(self, key: object, messages: Iterable[Message]) -> None:
        self._pending[id(key)] = list(messages)
        self.notify()

    def clear_preview(self, key: object) -> None:
        self._pending.pop(id(key), None)

    # --- scores -----------------------------------------------------------------------------

    @property
    def reward(self) -> float:
        """The weighted sum of the recorded rewards."""
        return sum(r.value for r in self.rewards.values() if r is not None)

    @property
    def has_error(self) -> bool:
        return not self.ok

    def record_metric(self, name: str, value: float) -> None:
        self.metrics[name] = float(value)

    def record_metrics(self, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.record_metric(name, value)

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = Reward(score=float(value), weight=float(weight))

    def record_judge_call(self, *, name: str, request: Mapping[str, Any], response: Any) -> None:
        """One judge exchange (``info["judge_calls"]``) and its billed usage (``extra_usage``),
        kept apart from the agent's own calls. ``response`` is a ``JudgeResponse``."""
        record = response.model_dump(mode="json")
        text = record.pop("text", "")
        # the reply as the original dumps it: the whole assistant message, its unset fields null
        message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None, "provider_state": None}
        self.info.setdefault("judge_calls", []).append(
            {"name": name, "request": json_copy(request), "response": {"message": message, **record}}
        )
        if response.usage is not None:
            self.extra_usage.append(response.usage)

    def record_judge(self, response: Any) -> None:
        """0.3.0's spelling: the judge's response alone, under ``info["judge"]``."""
        self.info.setdefault("judge", []).append(response.model_dump(mode="json"))
        if response.usage is not None:
            self.extra_usage.append(response.usage)

    # --- outcome ----------------------------------------------------------------------------

    def stop(self, condition: str, override: bool = False) -> None:
        """End the trace; the first condition stays unless ``override``."""
        self.is_completed = True
        if override or self.stop_condition is None:
            self.stop_condition = condition

    def record_timeout(self, stage: str) -> None:
        self.is_timeout = True
        self.stop(f"{stage}_timeout", override=True)

    def record_error(self, error: BaseException) -> None:
        """Record ``error`` and stop the trace as failed (``<boundary>_error``)."""
        tb = None
        if not isinstance(error, ProviderError) and error.__traceback__ is not None:
            tb = "".join(traceback.format_exception(error))
        self.errors.append(
            Error(type=type(error).__name__, message=str(error), status_code=getattr(error, "status_code", None), traceback=tb)
        )
        self.ok = False
        self.stop(stop_condition(error))

    @property
    def last_error(self) -> Error | None:
        return self.errors[-1] if self.errors else None

    # --- the message graph ------------------------------------------------------------------

    @property
    def branches(self) -> list[Branch]:
        by_node = {c.node: c for c in self.calls if c.node is not None}
        accepted = {link.node for n in self.nodes for link in n.semantic_parents if link.type == "compaction"}
        out = []
        for i, leaf in enumerate(graph.leaves(self.nodes)):
            ids = graph.path_to(self.nodes, leaf)
            attempt = any(link.type == "compaction_attempt" for link in self.nodes[leaf].semantic_parents)
            out.append(
                Branch(
                    index=i,
                    nodes=[self.nodes[n] for n in ids],
                    calls=[by_node[n] for n in ids if n in by_node],
                    trainable=not attempt or leaf in accepted,
                    mm_token_type_id_map=self.mm_token_type_id_map,
                )
            )
        return out

    def add_semantic_edges(self, edge_set: SemanticEdgeSet) -> None:
        """Link the nodes of the model calls an ACP harness names (by request id); replaying a
        set already applied changes nothing."""
        by_request: dict[str, int] = {}
        for call in self.calls:
            if call.acp is None or call.node is None:
                continue
            if not 0 <= call.node < len(self.nodes) or not self.nodes[call.node].sampled:
                raise ValueError(f"model call points at node {call.node}, which is not a sampled message")
            by_request[call.acp.request_id] = call.node  # a retried request: its last reply counts
        additions = []
        seen: set[tuple[int, int, str]] = set()
        for edge in edge_set.edges:
            ends = []
            for request_id in (edge.source_request_id, edge.target_request_id):
                if request_id not in by_request:
                    raise ValueError(f"semantic edge request {request_id!r} has no committed message node")
                ends.append(by_request[request_id])
            source, target = ends
            if source == target:
                raise ValueError("semantic edge resolves to the same message node")
            if (source, target, edge.type) in seen:
                raise ValueError(f"duplicate resolved semantic edge: {(source, target, edge.type)!r}")
            seen.add((source, target, edge.type))
            link = graph.ParentLink(node=source, type=edge.type)
            if link not in self.nodes[target].semantic_parents:
                additions.append((target, link))
        for target, link in additions:  # all or nothing
            self.nodes[target].semantic_parents.append(link)
        if additions:
            self.notify()

    @property
    def num_branches(self) -> int:
        return len(graph.leaves(self.nodes))

    @property
    def messages(self) -> Messages:
        branches = self.branches
        return branches[-1].messages if branches else []

    @property
    def last_message(self) -> Message:
        if not self.nodes:
            raise ValueError("trace has no messages")
        return self.nodes[-1].message

    @property
    def num_turns(self) -> int:
        return sum(1 for n in self.nodes if n.sampled)

    @property
    def assistant_messages(self) -> list[AssistantMessage]:
        """Every model reply in order (prompt-supplied assistant messages are not replies)."""
        return [n.message for n in self.nodes if n.sampled and isinstance(n.message, AssistantMessage)]

    @property
    def tool_messages(self) -> list[ToolMessage]:
        return [n.message for n in self.nodes if isinstance(n.message, ToolMessage)]

    @property
    def last_reply(self) -> str:
        """The root agent's answer, else the text of the last model reply ("" when none)."""
        if self.root_reply is not None:
            return self.root_reply.strip()
        replies = self.assistant_messages
        return (replies[-1].content or "").strip() if replies else ""

    @property
    def is_truncated(self) -> bool:
        if self.stop_condition in TRUNCATING_STOPS:
            return True
        for call in reversed(self.calls):  # the last call that did not fail
            if call.error is None:
                return call.finish_reason == "length"
        return False

    @property
    def transcript(self) -> str:
        """The last branch as text, one ``[role]`` block per message: an assistant's text and its
        tool calls, a tool result under ``[tool <name>]`` with its text, any other message's text."""
        blocks = []
        for m in self.messages:
            lines = [f"[{m.role}]"]
            if isinstance(m, AssistantMessage):
                if m.content:
                    lines.append(m.content)
                for call in m.tool_calls or []:
                    ns = f"{call.namespace}." if call.namespace else ""
                    lines.append(f"[tool_call {ns}{call.name}({call.arguments})]")
                blocks.append("\n".join(lines))
                continue
            if isinstance(m, ToolMessage) and m.name:
                lines[0] = f"[tool {m.name}]"
            if text := content_text(m.content):
                lines.append(text)
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    def commit_turn(self, messages: Iterable[Message], response: Response, *, tools: list[Tool] | None = None, sampling: Sampling | None = None, endpoint: str | None = None) -> int:
        """Record one model call: the prompt ``messages`` it saw and its ``response``.

        The prompt's longest prefix already on the graph is reused; the rest become new input
        nodes, then the reply becomes a sampled node. With token ids, the new prompt tokens go on
        the first new node (the template's scaffold included) and the completion on the reply,
        so a branch's ``token_ids`` is exactly ``prompt_ids + completion_ids`` of its last call.
        A prompt whose tokens do not extend the reused prefix's starts a new root path."""
        prompt = [m if isinstance(m, BaseModel) else _as_message(m) for m in messages]
        tokens = response.tokens
        private = self.__pydantic_private__  # read and written directly: a private getattr is slow
        prefix_ids = self._reused_prefix(prompt)
        if tokens is not None and prefix_ids:
            have: list[int] = []
            for n in prefix_ids:
                have.extend(self.nodes[n].token_ids)
            if not have or tokens.prompt_ids[: len(have)] != have:
                prefix_ids = []  # a prefix break: this call's tokens do not extend that path
        last = private["_last_path"]
        if last and last[-1] not in prefix_ids and len(prompt) > len(last) and _same(self.nodes[last[0]].message, prompt[0]):
            # the next turn of the last call's conversation (its tokens broke, or an earlier message
            # was rewritten) that does not continue its path: the sample splits here
            self.count_prefix("split")
        parent = prefix_ids[-1] if prefix_ids else None
        private["_reused_prefix_ids"], first_new = prefix_ids, len(self.nodes)
        offset = sum(len(self.nodes[n].token_ids) for n in prefix_ids) if tokens is not None else 0
        new_prompt_ids = list(tokens.prompt_ids[offset:]) if tokens is not None else []
        for i, message in enumerate(prompt[len(prefix_ids) :]):
            ids = new_prompt_ids if i == 0 else []
            new_prompt_ids = [] if i == 0 else new_prompt_ids
            node = MessageNode(parent=parent, message=message, token_ids=ids, mask=[False] * len(ids), tools=list(tools or []) if parent is None else [])
            self.nodes.append(node)
            parent = len(self.nodes) - 1
        completion = list(tokens.completion_ids) if tokens is not None else []
        scaffold = new_prompt_ids  # prompt tokens with no new message to carry them
        reply = MessageNode(
            parent=parent,
            message=response.message,
            sampled=True,
            token_ids=scaffold + completion,
            mask=[False] * len(scaffold) + [True] * len(completion),
            logprobs=list(tokens.completion_logprobs) if tokens is not None else [],
            tools=list(tools or []) if parent is None else [],
        )
        self.nodes.append(reply)
        node_id = len(self.nodes) - 1
        private["_last_path"] = [*prefix_ids, *range(first_new, node_id + 1)]
        self.calls.append(ModelCall(node=node_id, model=response.model, sampling=sampling, endpoint=endpoint, finish_reason=response.finish_reason, usage=response.usage))
        if tools:
            # each tool replaces the one of its (namespace, name), and goes last: one assignment
            latest: dict[tuple[str | None, str], Tool] = {}
            for tool in tools:
                key = (tool.namespace, tool.name)
                latest.pop(key, None)
                latest[key] = tool
            self.tools = [t for t in self.tools if (t.namespace, t.name) not in latest] + list(latest.values())
        self.notify()
        return node_id

    def commit_prompt(self, messages: Iterable[Message], *, tools: list[Tool] | None = None) -> None:
        """Record a prompt that ended before the model was called (a request ``@vf.stop`` fired on
        it): its messages beyond the longest prefix already on the graph become input nodes, with
        no reply and no model call."""
        prompt = [m if isinstance(m, BaseModel) else _as_message(m) for m in messages]
        prefix_ids = self._reused_prefix(prompt)
        parent = prefix_ids[-1] if prefix_ids else None
        first_new = len(self.nodes)
        for message in prompt[len(prefix_ids) :]:
            self.nodes.append(MessageNode(parent=parent, message=message, tools=list(tools or []) if parent is None else []))
            parent = len(self.nodes) - 1
        self.__pydantic_private__["_last_path"] = [*prefix_ids, *range(first_new, len(self.nodes))]
        if tools:
            known = {(t.namespace, t.name) for t in tools}
            self.tools = [t for t in self.tools if (t.namespace, t.name) not in known] + list(tools)
        self.notify()

    def count_prefix(self, kind: str) -> None:
        """One more turn under ``info["token_prefix"]``: ``extended`` (its prompt ids were made to
        extend the conversation's tokens, ``verifiers.v1.prefix``) or ``split`` (they did not)."""
        counts = self.info.get(TOKEN_PREFIX_KEY)
        counts = {"extended": 0, "split": 0, **(counts if isinstance(counts, dict) else {})}
        counts[kind] = int(counts.get(kind) or 0) + 1
        self.info[TOKEN_PREFIX_KEY] = counts

    def _reused_prefix(self, prompt: list[Message]) -> list[int]:
        """The longest prefix of ``prompt`` that is a path of the graph (newest branch first).

        The path of the last reply is tried first: a prompt that extends it (every turn of a
        plain conversation) needs no walk of the other branches."""
        if not self.nodes:
            return []  # the first call: nothing to reuse

        def matched(ids: list[int]) -> int:
            k = 0
            while k < len(ids) and k < len(prompt) and _same(self.nodes[ids[k]].message, prompt[k]):
                k += 1
            return k

        last = self.__pydantic_private__["_last_path"]
        if last and len(last) <= len(self.nodes) and matched(last) == len(last):
            return list(last)
        best: list[int] = []
        for leaf in reversed(graph.leaves(self.nodes)):
            ids = graph.path_to(self.nodes, leaf)
            k = matched(ids)
            if k > len(best):
                best = ids[:k]
        return best

    # --- token counts -----------------------------------------------------------------------

    @property
    def usage(self) -> Usage | None:
        return Usage.aggregate(c.usage for c in self.calls if c.usage is not None)

    def _token_counts(self) -> tuple[int, int, int]:
        """(input, output, total) tokens, counted once per state of the graph and of the calls'
        usages (a usage is replaced, never edited in place: an edited one is not seen)."""
        nodes, calls = self.nodes, self.calls
        usages = tuple([c.usage for c in calls])  # compared by identity, then by value
        private = self.__pydantic_private__  # read and written directly: a private getattr is slow
        cached = private["_token_counts_of"] if private is not None else None
        if cached is not None and cached[0] is nodes and cached[1] is calls and cached[2] == len(nodes) and cached[3] == usages:
            return cached[4]
        counts = _count_tokens(nodes, calls)
        if private is not None:
            private["_token_counts_of"] = (nodes, calls, len(nodes), usages, counts)
        return counts

    @computed_field
    @property
    def num_input_tokens(self) -> int:
        return self._token_counts()[0]

    @computed_field
    @property
    def num_output_tokens(self) -> int:
        return self._token_counts()[1]

    @computed_field
    @property
    def num_total_tokens(self) -> int:
        return self._token_counts()[2]

    def split_agent_time(self) -> None:
        span = self.timing.agent
        if not span.end:
            return
        model = sum(c.time.duration for c in self.calls)
        span.model.duration = min(model, span.duration)
        span.harness.duration = span.duration - span.model.duration

    def to_record(self, float_decimals: int | None = RECORD_FLOAT_DECIMALS) -> dict[str, Any]:
        """The JSON record (``traces.jsonl``): no raw tensors, per-token floats rounded."""
        with graph.float_decimals(float_decimals):
            return self.model_dump(mode="json", exclude=EXCLUDE_FIELDS, serialize_as_any=True)


def _same(a: BaseModel, b: BaseModel) -> bool:
    # field values only (pydantic's __eq__ also compares private and extra state): the hot loop of
    # matching a prompt against the graph
    return type(a) is type(b) and a.__dict__ == b.__dict__


def _as_message(m: Any) -> Message:
    if isinstance(m, BaseModel):
        return m  # type: ignore[return-value]
    from pydantic import TypeAdapter

    return TypeAdapter(Message).validate_python(m)


WireTrace = Trace[WireTaskData, State, WireAgentConfig]
"""A trace read without the run's packages: unknown task fields are kept, the agent config is loose."""


def json_copy(value: Any) -> Any:
    """A deep, JSON-shaped copy (a record never aliases the caller's objects)."""
    import json

    return json.loads(json.dumps(value, default=str))

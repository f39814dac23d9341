"""Data types shared by environments, rubrics, the rollout engine and user code.

Messages and rollout state are plain ``dict`` subclasses on purpose: the classic (OLD) API handed
environments OpenAI chat dicts, the newer (NEW) API hands them objects with attribute access. A dict
subclass with attribute access satisfies both (``m["content"]``, ``m.get("content")`` and
``m.content`` all work), serialises with ``json`` as is, and costs almost nothing to build, which
matters in the rollout hot path.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypedDict

if TYPE_CHECKING:
    from verifiers.clients.response import ModelResponse

__all__ = [
    "AssistantMessage",
    "ChatMessage",
    "ChatMessages",
    "ContentPart",
    "DatasetBuilder",
    "Endpoint",
    "Endpoints",
    "FinishReason",
    "FunctionCall",
    "GenerateOutputs",
    "GenericContentPart",
    "GroupRewardFunc",
    "ImageUrlContentPart",
    "ImageUrlSource",
    "IndividualRewardFunc",
    "Info",
    "InputAudioContentPart",
    "InputAudioSource",
    "JsonPrimitive",
    "Message",
    "MessageContent",
    "MessageType",
    "Messages",
    "ModelResponse",
    "RewardFunc",
    "RewardResult",
    "RolloutInput",
    "SamplingArgs",
    "State",
    "SystemMessage",
    "TaskSplit",
    "TextContentPart",
    "TextMessage",
    "Tool",
    "ToolCall",
    "ToolLike",
    "ToolMessage",
    "UserMessage",
    "to_message",
    "to_messages",
]


#: OpenAI SDK names the classic ``verifiers.types`` re-exported (``from verifiers.types import
#: ChatCompletionMessageToolCall``) and with it the classic top level (``vf.ChatCompletion``):
#: environments annotate with them and check replies against them. They are the SDK's own classes,
#: imported on first use so that ``import verifiers`` does not load the SDK. The tool calls our
#: engine puts on messages are :class:`ToolCall` dicts, as the classic 0.1.7 engine's were.
OPENAI_REEXPORTS: dict[str, str] = {
    "ChatCompletion": "openai.types.chat.chat_completion",
    "ChatCompletionMessageParam": "openai.types.chat.chat_completion_message_param",
    "ChatCompletionMessageToolCall": "openai.types.chat.chat_completion_message_tool_call",
    "ChatCompletionRole": "openai.types.chat.chat_completion_role",
    "ChatCompletionToolParam": "openai.types.chat.chat_completion_tool_param",
    "Completion": "openai.types.completion",
    "FunctionDefinition": "openai.types.shared_params",
    "FunctionParameters": "openai.types.shared_params",
    "AsyncOpenAI": "openai",
    "OpenAI": "openai",
}


def __getattr__(name: str) -> Any:
    source = OPENAI_REEXPORTS.get(name)
    if source is not None:
        import importlib

        return getattr(importlib.import_module(source), name)
    # ModelResponse lives next to the code that builds it (verifiers.clients.response); re-exported
    # lazily so that importing the types does not import the HTTP client package.
    if name == "ModelResponse":
        from verifiers.clients.response import ModelResponse

        return ModelResponse
    if name == "ClientConfig":
        from verifiers.clients.config import ClientConfig

        return ClientConfig
    raise AttributeError(f"module 'verifiers.types' has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------------
# Tool calls and messages
# ----------------------------------------------------------------------------------------------------


class ToolCall(dict):
    """One tool call of an assistant message, in the OpenAI dict shape.

    ``{"id": ..., "type": "function", "function": {"name": ..., "arguments": "<json>"}}`` as the
    server sent it, plus ``.id``, ``.name`` and ``.arguments`` (the JSON string) for code written
    against the NEW API.
    """

    __slots__ = ()

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        name: str | None = None,
        arguments: str | Mapping[str, Any] | None = None,
        type: str = "function",
    ) -> None:
        if data is not None:
            super().__init__(data)
            fn = self.get("function")
            if isinstance(fn, Mapping):
                if builtins.type(fn) is not dict:
                    self["function"] = dict(fn)
            elif "name" in self:  # flat {id, name, arguments} shape -> OpenAI shape
                flat_args = self.pop("arguments", "{}")
                self["function"] = {"name": self.pop("name"), "arguments": _args_json(flat_args)}
                self.setdefault("type", "function")
            return
        super().__init__(id=id, type=type, function={"name": name, "arguments": _args_json(arguments)})

    @property
    def id(self) -> str | None:
        return self.get("id")

    @property
    def type(self) -> str:
        return self.get("type") or "function"

    @property
    def function(self) -> FunctionCall:
        """``tool_call.function.name`` / ``.arguments``, as on the OpenAI SDK's tool-call objects that
        classic environments were written against (reads and writes go to ``self["function"]``)."""
        fn = self.get("function")
        if not isinstance(fn, dict):
            fn = self["function"] = dict(fn or {})
        return FunctionCall(fn)

    @property
    def name(self) -> str | None:
        fn = self.get("function") or {}
        return fn.get("name")

    @property
    def arguments(self) -> str:
        fn = self.get("function") or {}
        args = fn.get("arguments")
        return args if isinstance(args, str) else _args_json(args)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"id": self.get("id"), "type": self.get("type", "function"), "function": dict(self.get("function") or {})}


class FunctionCall:
    """The ``function`` part of a :class:`ToolCall` with attribute access (a view of its dict).

    >>> call = ToolCall(id="c1", name="add", arguments={"a": 1})
    >>> call.function.name, call.function.arguments
    ('add', '{"a": 1}')
    >>> call.function.arguments = '{"a": 2}'
    >>> call["function"]["arguments"]
    '{"a": 2}'
    """

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def name(self) -> str | None:
        return self._data.get("name")

    @name.setter
    def name(self, value: str) -> None:
        self._data["name"] = value

    @property
    def arguments(self) -> str:
        return _args_json(self._data.get("arguments"))

    @arguments.setter
    def arguments(self, value: str | Mapping[str, Any]) -> None:
        self._data["arguments"] = _args_json(value)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self._data)

    def __eq__(self, other: object) -> bool:
        return self._data == (other._data if isinstance(other, FunctionCall) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FunctionCall({self._data!r})"


def _args_json(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


class Message(dict):
    """A chat message: a dict (OpenAI shape) that also allows attribute access.

    Known fields that are absent read as ``None`` through attribute access (``msg.tool_calls``),
    like the pydantic models of the NEW API; ``msg["missing"]`` still raises ``KeyError``.
    """

    __slots__ = ()
    role_name: ClassVar[str | None] = None
    _fields: ClassVar[frozenset[str]] = frozenset(
        {"role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "refusal"}
    )

    def __init__(self, *args: Any, **fields: Any) -> None:
        data = args[0] if args and isinstance(args[0], Mapping) else None
        role = fields.get("role") or (data.get("role") if data is not None else None) or self.role_name
        if role is not None:
            super().__init__(role=role)
        else:
            super().__init__()
        if data is not None:
            self.update(data)
        elif args:
            self["content"] = args[0]
        if fields:
            self.update(fields)
        if "content" not in self:
            self["content"] = None if role == "assistant" else ""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name in self._fields:
                return None
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, exclude_none: bool = False, **_: Any) -> dict[str, Any]:
        """A plain-dict copy (what pydantic-style NEW code calls)."""
        out = {}
        for k, v in self.items():
            if exclude_none and v is None:
                continue
            if k == "tool_calls" and v:
                v = [dict(tc) for tc in v]
            out[k] = v
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class SystemMessage(Message):
    __slots__ = ()
    role_name = "system"


class UserMessage(Message):
    __slots__ = ()
    role_name = "user"


class AssistantMessage(Message):
    """An assistant turn; ``tool_calls`` items are :class:`ToolCall` objects (dicts too)."""

    __slots__ = ()
    role_name = "assistant"

    def __init__(self, *args: Any, **fields: Any) -> None:
        super().__init__(*args, **fields)
        calls = self.get("tool_calls")
        if calls:
            self["tool_calls"] = [c if type(c) is ToolCall else ToolCall(_plain(c)) for c in calls]
        elif "tool_calls" in self:
            del self["tool_calls"]


class ToolMessage(Message):
    __slots__ = ()
    role_name = "tool"


_ROLE_CLASSES: dict[str, type[Message]] = {
    "system": SystemMessage,
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
    "developer": SystemMessage,
}

Messages = list[Message] | str

# Type aliases environments import by name (``from verifiers.types import Info, SamplingArgs ...``).
ChatMessage = Message
ChatMessages = list[Message]
Info = dict[str, Any]
SamplingArgs = dict[str, Any]
RolloutInput = dict[str, Any]
RewardFunc = Callable[..., Any]


def _plain(obj: Any) -> Any:
    """A mapping for pydantic / openai objects (they expose ``model_dump``)."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(exclude_none=True)
    raise TypeError(f"expected a message dict, got {type(obj).__name__}")


def to_message(obj: Any) -> Message:
    """Wrap a dict / openai message object into the matching :class:`Message` class (no copy when
    it already is one)."""
    if isinstance(obj, Message):
        return obj
    data = _plain(obj)
    cls = _ROLE_CLASSES.get(data.get("role", ""), Message)
    return cls(data)


def to_messages(objs: Iterable[Any]) -> list[Message]:
    return [to_message(m) for m in objs]


# ----------------------------------------------------------------------------------------------------
# Rollout state
# ----------------------------------------------------------------------------------------------------


# Score records of the classic Rubric (``score_rollout`` / ``score_rollouts``); classic environments
# import them from here and from ``verifiers.rubrics.rubric``.
@dataclass(slots=True)
class RolloutScore:
    """The score of one rollout (OLD ``Rubric`` return type of ``score_rollout``)."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class RolloutScores:
    """Scores of several rollouts (OLD ``Rubric`` return type of ``score_rollouts``)."""

    reward: list[float]
    metrics: dict[str, list[float]] = field(default_factory=dict)



class State(dict):
    """The state of one rollout: a dict with attribute access (see docs/contracts.md for the keys)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


# ----------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------

_COLUMNS = ("prompt", "completion", "answer", "task", "info", "reward", "example_id", "error")


class _Column:
    """A read-only attribute listing one field of every output record (the OLD result shape)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return obj._column(self.key)


class GenerateOutputs(dict):
    """The result of ``evaluate`` / ``generate``: both result shapes of the classic API.

    NEW shape: ``out["outputs"]`` (a sequence with one record per rollout, see contracts.md) and
    ``out["metadata"]`` (the run summary). OLD shape: column attributes ``out.prompt``,
    ``out.completion``, ``out.answer``, ``out.state``, ``out.task``, ``out.info``, ``out.reward``
    (lists, one item per rollout) and ``out.metrics`` (metric name -> list).

    Memory: when results were saved to disk, ``outputs`` is a :class:`verifiers.utils.results.LazyOutputs`
    that reads records back from ``results.jsonl`` on access (the engine only kept rewards, metrics,
    errors and usage while running, so a 20,000-rollout run stays small); ``out.state`` then holds the
    saved records. Without saving, ``outputs`` is a list and ``out.state`` the live rollout states.
    """

    def __init__(
        self,
        outputs: Sequence[dict[str, Any]],
        metadata: dict[str, Any],
        states: Sequence[Any] | None = None,
    ) -> None:
        super().__init__(outputs=outputs, metadata=metadata)
        self._states = states

    # dict subclasses with __dict__ need explicit attribute storage; keep states outside the mapping
    # so ``json.dumps(out)`` writes only outputs + metadata.

    @property
    def outputs(self) -> Sequence[dict[str, Any]]:
        return self["outputs"]

    @property
    def metadata(self) -> dict[str, Any]:
        return self["metadata"]

    def _column(self, key: str) -> list[Any]:
        return [rec.get(key) for rec in self["outputs"]]

    # OLD column-oriented attributes: ``out.reward`` is ``[rec["reward"] for rec in out["outputs"]]``.
    prompt = _Column("prompt")
    completion = _Column("completion")
    answer = _Column("answer")
    task = _Column("task")
    info = _Column("info")
    reward = _Column("reward")
    example_id = _Column("example_id")
    error = _Column("error")

    @property
    def state(self) -> list[Any]:
        if self._states is not None:
            return list(self._states)
        return list(self["outputs"])

    @property
    def metrics(self) -> dict[str, list[float]]:
        names: list[str] = []
        seen: set[str] = set()
        records = list(self["outputs"])
        for rec in records:
            for k in rec.get("metrics") or {}:
                if k not in seen:
                    seen.add(k)
                    names.append(k)
        return {k: [(rec.get("metrics") or {}).get(k, 0.0) for rec in records] for k in names}

    def __iter__(self) -> Iterator[str]:
        return super().__iter__()

    def __repr__(self) -> str:
        meta = self["metadata"]
        return (
            f"GenerateOutputs(num_rollouts={len(self['outputs'])}, avg_reward={meta.get('avg_reward')!r}, "
            f"num_errors={meta.get('num_errors')!r})"
        )


# ----------------------------------------------------------------------------------------------------
# Tool definitions
# ----------------------------------------------------------------------------------------------------


class Tool(dict):
    """A provider-agnostic tool definition (``tool_defs``): ``{"name", "description", "parameters"}``.

    ``parameters`` is a JSON schema; ``strict`` (optional) asks the provider to hold arguments to it.
    A dict with attribute access, like the messages: ``tool["name"]`` and ``tool.name`` both work.

    >>> t = Tool(name="add", description="Add two numbers.", parameters={"type": "object", "properties": {}})
    >>> (t.name, t["description"], t.strict)
    ('add', 'Add two numbers.', None)
    """

    __slots__ = ()

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        strict: bool | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(data or {})
        given = {"name": name, "description": description, "parameters": parameters, "strict": strict}
        self.update({k: v for k, v in given.items() if v is not None})
        self.update(extra)
        self.setdefault("description", "")
        self.setdefault("parameters", {"type": "object", "properties": {}})
        if "name" not in self:
            raise ValueError("a tool definition needs a name")

    @property
    def name(self) -> str:
        return self["name"]

    @property
    def description(self) -> str:
        return self["description"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self["parameters"]

    @property
    def strict(self) -> bool | None:
        return self.get("strict")

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self)


# ----------------------------------------------------------------------------------------------------
# Content parts and the other classic type names environments import
# ----------------------------------------------------------------------------------------------------


class _Part(dict):
    """A content part: a dict in the OpenAI shape with attribute access and a fixed ``type``."""

    __slots__ = ()
    part_type: ClassVar[str | None] = None

    def __init__(self, data: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        super().__init__(data or {})
        self.update(fields)
        if self.part_type is not None:
            self.setdefault("type", self.part_type)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in self.items()}


class TextContentPart(_Part):
    """``{"type": "text", "text": ...}``"""

    __slots__ = ()
    part_type = "text"


class ImageUrlSource(_Part):
    """``{"url": ...}`` (an http(s) or ``data:`` URL)."""

    __slots__ = ()


class ImageUrlContentPart(_Part):
    """``{"type": "image_url", "image_url": {"url": ...}}``"""

    __slots__ = ()
    part_type = "image_url"


class InputAudioSource(_Part):
    """``{"data": <base64>, "format": "wav" | "mp3" ...}``"""

    __slots__ = ()


class InputAudioContentPart(_Part):
    """``{"type": "input_audio", "input_audio": {"data", "format"}}``"""

    __slots__ = ()
    part_type = "input_audio"


class GenericContentPart(_Part):
    """Any other part; ``type`` is given by the caller."""

    __slots__ = ()


class TextMessage(Message):
    """A plain-text (completion-style) prompt or reply, role ``"text"``."""

    __slots__ = ()
    role_name = "text"


_ROLE_CLASSES["text"] = TextMessage

ContentPart = TextContentPart | ImageUrlContentPart | InputAudioContentPart | GenericContentPart | dict[str, Any]
MessageContent = str | list[ContentPart]
MessageType = Literal["chat", "completion"]
FinishReason = Literal["stop", "length", "tool_calls"] | None
JsonPrimitive = Literal["string", "number", "integer", "boolean", "array", "object"]
IndividualRewardFunc = Callable[..., float | Awaitable[float]]
GroupRewardFunc = Callable[..., list[float] | Awaitable[list[float]]]
DatasetBuilder = Callable[[], Any]  # a zero-argument callable that builds a datasets.Dataset lazily
ToolLike = str | Tool | Callable[..., object]
TaskSplit = Literal["train", "eval"]


class Endpoint(TypedDict):
    """One entry of an endpoints registry (``configs/endpoints.py``): model name, base URL, key variable."""

    model: str
    url: str
    key: str


Endpoints = dict[str, Endpoint]


class _RewardResultBase(TypedDict):
    score: float


class RewardResult(_RewardResultBase, total=False):
    """What a reward function may return instead of a number: the score, and feedback for prompt
    optimisers (the score is what counts; the feedback is not part of the reward)."""

    feedback: str | None


"""Messages, tools, sampling and token records of the v1 API: typed pydantic models.

Field names and shapes are the original 0.4.0 wire's (a trace we write loads there, and theirs
here). Messages are a union discriminated by ``role``; a raw OpenAI-style dict validates into
the right class.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

ON_FIRST_USE = ConfigDict(defer_build=True)
"""The config of a record the run path makes but defining a taskset does not: its validator and
serializer are built on first use, not at import (``import verifiers.v1`` plus a taskset stays
cheap; tests/v1/test_import.py)."""


def new_list() -> list[Any]:
    """A fresh empty list: ``Field(default_factory=new_list)`` in place of ``default_factory=list``.
    Pydantic reads a default factory's signature when it defines a model, and a builtin's comes
    from parsing its text signature (a tokenizer regex compiled on first use, then a tokenize per
    field: a few ms of ``import verifiers.v1`` plus a taskset); a Python function's is read free."""
    return []


ID = str
"""A plugin id: the name of an installed package that exports the plugin (``owner/name@1.0`` works)."""


class TextContentPart(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ImageUrlSource(BaseModel):
    url: str


class ImageUrlContentPart(BaseModel):
    type: Literal["image_url"] = "image_url"
    image_url: ImageUrlSource


ContentPart = Annotated[TextContentPart | ImageUrlContentPart, Field(discriminator="type")]
MessageContent = str | list[ContentPart]


def content_text(content: MessageContent | None) -> str:
    """The text of a message's content; image parts contribute nothing."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, TextContentPart))


class SystemMessage(BaseModel):
    role: Literal["system"] = "system"
    content: MessageContent


class UserMessage(BaseModel):
    role: Literal["user"] = "user"
    content: MessageContent


class ToolCall(BaseModel):
    id: str
    type: Literal["function", "custom"] = "function"
    name: str
    namespace: str | None = None
    arguments: str
    """The arguments exactly as the model wrote them (a JSON string for function tools)."""


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    provider_state: list[dict[str, Any]] | None = None


class ToolMessage(BaseModel):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: MessageContent
    name: str | None = None


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
Messages = list[Message]


class Tool(BaseModel):
    # provider-specific declaration keys ride along
    model_config = ConfigDict(extra="allow", defer_build=True)

    type: str = "function"
    name: str
    namespace: str | None = None
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class InterceptRecord(BaseModel):
    """One ``@vf.intercept`` rewrite, as the trace records it (``request_rewrites`` ...)."""

    model_config = ON_FIRST_USE

    handler: str


class Request(BaseModel):
    """The conversation about to go to the model (what ``@vf.stop`` / ``@vf.intercept`` see)."""

    model_config = ON_FIRST_USE

    messages: Messages
    tools: list[Tool] | None = None


FinishReason = Literal["stop", "length", "tool_calls"] | None


class Usage(BaseModel):
    """Token accounting of one model call. ``prompt_tokens`` excludes cache reads."""

    model_config = ON_FIRST_USE

    prompt_tokens: int
    completion_tokens: int
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost: float | None = None

    @property
    def input_tokens(self) -> int:
        return self.prompt_tokens + (self.cached_input_tokens or 0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.completion_tokens

    @classmethod
    def from_openai(cls, usage: Any | None) -> Usage | None:
        """From an OpenAI-style usage object (or dict): cached prompt tokens are split out."""
        if usage is None:
            return None

        def get(obj: Any, name: str) -> Any:
            return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

        cached = get(get(usage, "prompt_tokens_details") or {}, "cached_tokens")
        reasoning = get(get(usage, "completion_tokens_details") or {}, "reasoning_tokens")
        return cls(
            prompt_tokens=(get(usage, "prompt_tokens") or 0) - (cached or 0),
            completion_tokens=get(usage, "completion_tokens") or 0,
            cached_input_tokens=cached,
            reasoning_tokens=reasoning,
            cost=get(usage, "cost"),
        )

    @classmethod
    def aggregate(cls, usages: Iterable[Usage]) -> Usage | None:
        """The sum of ``usages`` (None when there are none); an optional count is None only when
        no call reported it, so one silent provider does not erase the others' figures."""
        items = list(usages)
        if not items:
            return None

        def optional(name: str) -> Any:
            values = [getattr(u, name) for u in items if getattr(u, name) is not None]
            return sum(values) if values else None

        return cls(
            prompt_tokens=sum(u.prompt_tokens for u in items),
            completion_tokens=sum(u.completion_tokens for u in items),
            cached_input_tokens=optional("cached_input_tokens"),
            reasoning_tokens=optional("reasoning_tokens"),
            cost=optional("cost"),
        )


@dataclass
class SamplingMask:
    """Per completion token, the token ids that survived the sampler's filters, stored flat:
    ``ids`` (int32) and ``counts`` (ids per token)."""

    ids: Any
    counts: Any


class TurnTokens(BaseModel):
    """The token ids of one model call (for training): what the model read and what it sampled."""

    model_config = ON_FIRST_USE

    prompt_ids: list[int] = Field(default_factory=new_list)
    completion_ids: list[int] = Field(default_factory=new_list)
    completion_logprobs: list[float] = Field(default_factory=new_list)


class Response(BaseModel):
    """One model reply as the interception layer records it."""

    model_config = ON_FIRST_USE

    id: str
    created: int
    model: str
    message: AssistantMessage
    finish_reason: FinishReason
    usage: Usage | None = None
    tokens: TurnTokens | None = None
    raw: dict | None = Field(default=None, exclude=True, repr=False)


class SamplingConfig(BaseModel):
    """Sampling knobs; provider-specific keys pass through. ``max_completion_tokens`` and an
    ``extra_body`` layer fold into one key per parameter."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = Field(None, validation_alias=AliasChoices("max_tokens", "max_completion_tokens"))

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        folded: dict[str, Any] = {}
        for layer in (data.get("extra_body") or {}, data):
            layer = {k: v for k, v in layer.items() if k != "extra_body"}
            if "max_completion_tokens" in layer:
                layer.setdefault("max_tokens", layer.pop("max_completion_tokens"))
            folded.update(layer)
        return folded


Sampling = SamplingConfig


def messages_to_openai(messages: list[Message]) -> list[dict[str, Any]]:
    """v1 messages as OpenAI chat messages (tool calls nested under ``function``)."""
    out = []
    for m in messages:
        d = m.model_dump(exclude_none=True)
        if isinstance(m, AssistantMessage):
            d.pop("provider_state", None)
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
                ]
            d.setdefault("content", None)
        out.append(d)
    return out

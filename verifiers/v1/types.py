"""Tools, model-call and token records of the v1 API: typed pydantic models; this module also
serves the names the original keeps here (messages: ``verifiers.v1.messages``; ``SamplingConfig``:
``verifiers.v1.configs``; ``ID``: ``verifiers.v1.plugins``).

Field names and shapes are the original 0.4.0 wire's (a trace we write loads there, and theirs
here).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from verifiers.v1.configs import Sampling, SamplingConfig
from verifiers.v1.fields import ON_FIRST_USE, new_list
from verifiers.v1.messages import (
    AssistantMessage,
    ContentPart,
    ImageUrlContentPart,
    ImageUrlSource,
    Message,
    MessageContent,
    Messages,
    SystemMessage,
    TextContentPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    content_text,
    messages_to_openai,
)
from verifiers.v1.plugins import ID

__all__ = [
    "ID",
    "ON_FIRST_USE",
    "AssistantMessage",
    "ContentPart",
    "FinishReason",
    "ImageUrlContentPart",
    "ImageUrlSource",
    "InterceptRecord",
    "Message",
    "MessageContent",
    "Messages",
    "Request",
    "Response",
    "Sampling",
    "SamplingConfig",
    "SamplingMask",
    "SystemMessage",
    "TextContentPart",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "TurnTokens",
    "Usage",
    "UserMessage",
    "content_text",
    "messages_to_openai",
    "new_list",
]


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
        # a provider's figures are data: a detail that is not a count (or a cost that is not a
        # number) is left out rather than failing the call
        cached = _count(_get(_get(usage, "prompt_tokens_details") or _NO_DETAILS, "cached_tokens"))
        reasoning = _count(_get(_get(usage, "completion_tokens_details") or _NO_DETAILS, "reasoning_tokens"))
        cost = _get(usage, "cost")
        prompt = _get(usage, "prompt_tokens") or 0
        if cached is not None and cached > prompt:
            cached = None  # more cache reads than prompt tokens: not a split we can trust
        return cls(
            prompt_tokens=prompt - (cached or 0),
            completion_tokens=_get(usage, "completion_tokens") or 0,
            cached_input_tokens=cached,
            reasoning_tokens=reasoning,
            cost=float(cost) if type(cost) in (int, float) and cost == cost else None,
        )

    @classmethod
    def of_response(cls, resp: Any) -> Usage | None:
        """The usage of one model client response (``verifiers.clients.ModelResponse``): the body's
        own when it gives both counts as integers (its cached and reasoning token details and cost
        come with it), else the client's counts (filled from token ids when the body gave none)."""
        raw = resp.raw.get("usage") if isinstance(resp.raw, dict) else None
        if isinstance(raw, dict) and type(raw.get("prompt_tokens")) is int and type(raw.get("completion_tokens")) is int:
            return cls.from_openai(raw)
        return cls.from_openai(resp.usage)

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


_NO_DETAILS: dict[str, Any] = {}  # read only


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _get(obj: Any, name: str) -> Any:
    # a usage (or its details) as a dict or as an object with attributes (the OpenAI SDK's)
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


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

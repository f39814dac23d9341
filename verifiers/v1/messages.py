"""Messages of the v1 API: typed pydantic models (``verifiers.v1.types`` in the original, which
still serves them).

Field names and shapes are the original 0.4.0 wire's (a trace we write loads there, and theirs
here). Messages are a union discriminated by ``role``; a raw OpenAI-style dict validates into
the right class. Task data hold them (``TaskData.prompt``), so they are part of defining a taskset;
the model-call records (``verifiers.v1.types``) are not.
"""

# Field annotations here are objects, not strings (no ``from __future__ import annotations``):
# pydantic would compile and evaluate each one when it defines the model, a cost every
# ``import verifiers.v1`` plus a taskset pays (benchmarks/import_time.py --cases v1).

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


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


def messages_to_openai(messages: list[Message]) -> list[dict[str, Any]]:
    """v1 messages as OpenAI chat messages (tool calls nested under ``function``)."""
    out = []
    for m in messages:
        if type(m) in _PLAIN and type(m.content) is str:  # what model_dump(exclude_none=True) gives
            out.append({"role": m.role, "content": m.content})
            continue
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


_PLAIN = frozenset({SystemMessage, UserMessage})
"""Message classes whose only fields are ``role`` and ``content``."""

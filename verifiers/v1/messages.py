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
            # a reply with tool calls and no text has no content key (as the original's requests go
            # out); strict providers refuse a reply with neither: an empty one is ""
            if not m.tool_calls:
                d.setdefault("content", "")
        out.append(d)
    return out


_PLAIN = frozenset({SystemMessage, UserMessage})
"""Message classes whose only fields are ``role`` and ``content``."""


MAX_TOOL_OUTPUT = 20_000
"""Bytes (UTF-8) of one tool result the model sees, the original's bound: a longer one keeps its
first and last halves, with a line saying how much was cut between them."""


def capped_tool_output(text: MessageContent) -> MessageContent:
    """``text`` (a tool result) within ``MAX_TOOL_OUTPUT`` bytes: a longer one keeps its first and
    last halves, with a line saying how much was cut between them."""
    if not isinstance(text, str):  # text and image parts (an MCP tool's image): cap each text
        return [p.model_copy(update={"text": capped_tool_output(p.text)}) if isinstance(p, TextContentPart) else p for p in text]
    if len(text) * 4 <= MAX_TOOL_OUTPUT:  # within the bound however it encodes: no encoding needed
        return text
    data = text.encode()
    if len(data) <= MAX_TOOL_OUTPUT:
        return text
    keep = MAX_TOOL_OUTPUT // 2
    head, tail = data[:keep].decode(errors="ignore"), data[-keep:].decode(errors="ignore")
    return f"{head}\n[... {len(data) - 2 * keep:,} of {len(data):,} bytes cut here ...]\n{tail}"

"""Provider wire formats (the original's ``verifiers.v1.dialects``), as a ``Client`` is asked for a
reply in one: ``client.get_response(ChatDialect(), body, sampling)``.

Ours speaks OpenAI chat completions (``ChatDialect``), as its interception proxy does. The other
two formats the original serves (OpenAI responses, Anthropic messages) are named here so code
that refers to them imports, and a client asked to speak one refuses in one line."""

from __future__ import annotations

from typing import ClassVar


class Dialect:
    """One provider wire format: its name and the route a request in it goes to."""

    name: ClassVar[str] = ""
    route: ClassVar[str] = ""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ChatDialect(Dialect):
    """OpenAI chat completions (``POST /chat/completions``)."""

    name = "chat"
    route = "/chat/completions"


class ResponsesDialect(Dialect):
    """OpenAI responses (``POST /responses``): not spoken here."""

    name = "responses"
    route = "/responses"


class AnthropicDialect(Dialect):
    """Anthropic messages (``POST /messages``): not spoken here."""

    name = "anthropic"
    route = "/messages"


DIALECTS: tuple[Dialect, ...] = (ChatDialect(), ResponsesDialect(), AnthropicDialect())

__all__ = ["DIALECTS", "AnthropicDialect", "ChatDialect", "Dialect", "ResponsesDialect"]

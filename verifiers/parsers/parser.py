"""The base parser: an extraction function applied to the model's last answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Parser", "message_text"]


def message_text(content: Any) -> str:
    """The text of a message ``content`` (a string, ``None``, or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in (None, "text"):
                    parts.append(str(part.get("text", "")))
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(content)


def _identity(text: str) -> str:
    return text


class Parser:
    """Extracts answers from completions.

    ``parse(text)`` applies ``extract_fn``; ``parse_answer(completion)`` parses the last assistant
    message with content (or the completion string itself for completion-mode environments).
    Unknown keyword arguments become attributes (as in every constructor of the classic API).
    """

    def __init__(self, extract_fn: Callable[[str], Any] = _identity, **kwargs: Any) -> None:
        self.extract_fn = extract_fn
        from verifiers.utils.keywords import accept_keywords

        accept_keywords(self, kwargs, refuse=True)  # the classic Parser took no other keyword

    # ----- parsing --------------------------------------------------------------------------------

    def parse(self, text: str) -> Any:
        """Apply ``extract_fn`` to ``text``."""
        return self.extract_fn(text)

    def parse_answer(self, completion: Any) -> Any:
        """The parsed answer of ``completion`` (a string, or a list of messages), or None."""
        if completion is None:
            return None
        if isinstance(completion, str):
            return self.parse(completion)
        for msg in reversed(self.get_assistant_messages(completion)):
            text = message_text(msg.get("content"))
            if text.strip():
                return self.parse(text)
        return None

    # ----- message helpers ------------------------------------------------------------------------

    @staticmethod
    def _by_role(messages: Any, role: str) -> list[Any]:
        if not messages or isinstance(messages, str):
            return []
        return [m for m in messages if isinstance(m, dict) and m.get("role") == role]

    def get_assistant_messages(self, completion: Any) -> list[Any]:
        """The assistant messages of a completion, in order."""
        return self._by_role(completion, "assistant")

    def get_user_messages(self, messages: Any) -> list[Any]:
        return self._by_role(messages, "user")

    def get_system_messages(self, messages: Any) -> list[Any]:
        return self._by_role(messages, "system")

    def get_tool_messages(self, messages: Any) -> list[Any]:
        return self._by_role(messages, "tool")

    # ----- format ---------------------------------------------------------------------------------

    def get_format_str(self) -> str:
        """A description of the expected output format (empty: any format)."""
        return ""

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function scoring the output format (the base parser accepts any format: 1.0)."""

        def format_reward_func(completion: Any = None, **kwargs: Any) -> float:
            return 1.0

        return format_reward_func

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

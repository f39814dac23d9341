"""Parsers for reasoning models that think inside ``<think>...</think>`` before answering."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Parser, _identity, message_text

__all__ = ["ThinkParser"]


class ThinkParser(Parser):
    """Answers come after ``</think>``.

    ``parse`` returns ``extract_fn`` of the text after the last ``</think>``, or ``""`` when the
    model never closed its think block (it did not answer). The format reward gives 1.0 to an
    assistant message with exactly one ``<think>...</think>`` block at the start followed by a
    non-empty answer (averaged over assistant messages).
    """

    def __init__(self, extract_fn: Callable[[str], Any] = _identity, **kwargs: Any) -> None:
        super().__init__(extract_fn=extract_fn, **kwargs)

    def parse(self, text: str) -> Any:
        if "</think>" not in text:
            return ""
        return self.extract_fn(text.rsplit("</think>", 1)[1].strip())

    def get_format_str(self) -> str:
        return "Think step by step inside <think>...</think>, then give your answer after </think>."

    @staticmethod
    def _well_formed(text: str) -> bool:
        stripped = text.strip()
        return (
            stripped.startswith("<think>")
            and stripped.count("<think>") == 1
            and stripped.count("</think>") == 1
            and bool(stripped.split("</think>", 1)[1].strip())
        )

    def get_format_reward_func(self) -> Callable[..., float]:
        def format_reward_func(completion: Any = None, **kwargs: Any) -> float:
            if isinstance(completion, str):
                return 1.0 if self._well_formed(completion) else 0.0
            msgs = self.get_assistant_messages(completion)
            if not msgs:
                return 0.0
            return sum(1.0 for m in msgs if self._well_formed(message_text(m.get("content")))) / len(msgs)

        return format_reward_func

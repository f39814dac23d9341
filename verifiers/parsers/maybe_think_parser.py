"""A parser that tolerates models with or without a ``<think>`` block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Parser, _identity

__all__ = ["MaybeThinkParser"]


class MaybeThinkParser(Parser):
    """Strips a ``<think>...</think>`` block when present, then applies ``extract_fn``.

    Use it when the same environment serves reasoning and non-reasoning models (a plain answer is
    parsed as is).
    """

    def __init__(self, extract_fn: Callable[[str], Any] = _identity, **kwargs: Any) -> None:
        super().__init__(extract_fn=extract_fn, **kwargs)

    def parse(self, text: str) -> Any:
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        return self.extract_fn(text.strip())

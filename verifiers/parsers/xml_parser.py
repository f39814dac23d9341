"""A parser for answers structured with XML-like tags (``<think>...</think><answer>...</answer>``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from verifiers.parsers.parser import Parser, message_text

__all__ = ["XMLParser"]


@lru_cache(maxsize=256)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    return re.compile(rf"<{t}>\s*(.*?)\s*</{t}>", re.DOTALL)


@lru_cache(maxsize=256)
def _open_pattern(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    return re.compile(rf"<{t}>\s*(.*)$", re.DOTALL)


class XMLParser(Parser):
    """Fields in tags; each field is a name or a tuple ``(canonical, alternative, ...)``.

    ``parse(text)`` returns an object with one attribute per tag name (canonical names and every
    alternative), ``None`` when absent; the canonical attribute holds the first alternative found.
    ``parse_answer(completion)`` returns ``answer_field`` of the last assistant message that has it.
    """

    def __init__(
        self,
        fields: Sequence[str | tuple[str, ...] | list[str]] = ("think", "answer"),
        answer_field: str = "answer",
        extract_fn: Callable[[str], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if extract_fn is not None:
            self.extract_fn = extract_fn
        self._fields: list[tuple[str, tuple[str, ...]]] = []
        seen: set[str] = set()
        for field in fields:
            if isinstance(field, str):
                canonical, alternatives = field, (field,)
            elif isinstance(field, tuple | list) and field and all(isinstance(f, str) for f in field):
                canonical, alternatives = field[0], tuple(field)
            else:
                raise ValueError(f"XMLParser field must be a string or a tuple of strings, got {field!r}")
            if canonical in seen:
                raise ValueError(f"duplicate XMLParser field {canonical!r}")
            seen.add(canonical)
            self._fields.append((canonical, alternatives))
        self.answer_field = answer_field

    def get_fields(self) -> list[str]:
        """Canonical field names, in order."""
        return [c for c, _ in self._fields]

    def parse(self, text: str, strip: bool = True, last: bool = False) -> SimpleNamespace:
        """Extract every field from ``text`` (the first occurrence, or the last with ``last=True``)."""
        values: dict[str, Any] = {}
        text = text or ""
        for canonical, alternatives in self._fields:
            chosen = None
            for alt in alternatives:
                matches = _tag_pattern(alt).findall(text)
                value = (matches[-1] if last else matches[0]) if matches else None
                if value is not None and strip:
                    value = value.strip()
                values[alt] = value
                if chosen is None and value is not None:
                    chosen = value
            values[canonical] = chosen
        return SimpleNamespace(**values)

    def parse_answer(self, completion: Any) -> str | None:
        if completion is None:
            return None
        if isinstance(completion, str):
            return getattr(self.parse(completion, last=True), self.answer_field, None)
        for msg in reversed(self.get_assistant_messages(completion)):
            value = getattr(self.parse(message_text(msg.get("content")), last=True), self.answer_field, None)
            if value is not None:
                return value
        return None

    def format(self, **kwargs: Any) -> str:
        """Render fields as tags, in field order; a field may be given by any of its names."""
        parts = []
        for _canonical, alternatives in self._fields:
            for name in alternatives:
                if name in kwargs and kwargs[name] is not None:
                    parts.append(f"<{name}>\n{kwargs[name]}\n</{name}>")
                    break
        return "\n".join(parts)

    def get_format_str(self) -> str:
        lines = []
        for _canonical, alternatives in self._fields:
            names = " | ".join(f"<{a}>" for a in alternatives)
            lines.append(f"<{alternatives[0]}>\n...\n</{alternatives[0]}>" + (f"  (or {names})" if len(alternatives) > 1 else ""))
        return "Respond in the following format:\n" + "\n".join(lines)

    def _message_format_score(self, text: str) -> float:
        """1.0 when every field present is a single well-formed tag pair and at least one field is
        present; 0.5 when a field is opened but not closed, or repeated; 0.0 with no field."""
        present = 0
        malformed = 0
        for _canonical, alternatives in self._fields:
            for alt in alternatives:
                n_open = text.count(f"<{alt}>")
                n_close = text.count(f"</{alt}>")
                if n_open == 0 and n_close == 0:
                    continue
                present += 1
                if n_open != 1 or n_close != 1:
                    malformed += 1
                break
        if present == 0:
            return 0.0
        return 0.5 if malformed else 1.0

    def get_format_reward_func(self) -> Callable[..., float]:
        def format_reward_func(completion: Any = None, **kwargs: Any) -> float:
            if isinstance(completion, str):
                return self._message_format_score(completion)
            msgs = self.get_assistant_messages(completion)
            if not msgs:
                return 0.0
            return sum(self._message_format_score(message_text(m.get("content"))) for m in msgs) / len(msgs)

        return format_reward_func

    def __repr__(self) -> str:
        return f"XMLParser(fields={[a if len(a) > 1 else c for c, a in self._fields]!r}, answer_field={self.answer_field!r})"

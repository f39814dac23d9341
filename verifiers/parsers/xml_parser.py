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


class XMLParser(Parser):
    """Fields in tags; each field is a name or a tuple ``(canonical, alternative, ...)``.

    ``parse(text)`` returns an object with one attribute per tag name (every name of every field),
    each the text of that tag, or ``None`` when the tag is absent. ``format(**values)`` writes each
    field under its canonical tag. ``parse_answer(completion)`` returns ``answer_field`` of the last
    assistant message that has it. All as the classic library (0.1.x and 0.3.x alike) behaves.
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
        """Every tag of every field in ``text``: the first occurrence, or the last with ``last=True``.
        A field's names are looked up each on its own (``answer`` is None when only its alternative
        ``final`` is present)."""
        values: dict[str, Any] = {}
        text = text or ""
        for _canonical, alternatives in self._fields:
            for alt in alternatives:
                matches = _tag_pattern(alt).findall(text)
                value = (matches[-1] if last else matches[0]) if matches else None
                values[alt] = value.strip() if value is not None and strip else value
        return SimpleNamespace(**values)

    def parse_answer(self, completion: Any) -> str | None:
        """``answer_field`` of a text completion (its last occurrence), or of the last assistant
        message that has one (that message's first occurrence)."""
        if completion is None:
            return None
        if isinstance(completion, str):
            return getattr(self.parse(completion, last=True), self.answer_field, None)
        for msg in reversed(self.get_assistant_messages(completion)):
            value = getattr(self.parse(message_text(msg.get("content"))), self.answer_field, None)
            if value is not None:
                return value
        return None

    def format(self, **kwargs: Any) -> str:
        """Every field under its canonical tag, in field order; a field's value may be given by
        any of its names (the canonical one first). A field with no value is a ``ValueError``."""
        parts = []
        for canonical, alternatives in self._fields:
            value = kwargs.get(canonical)
            if canonical not in kwargs:
                value = next((kwargs[a] for a in alternatives if a in kwargs), None)
            if value is None:
                raise ValueError(f"XMLParser.format: no value for field {canonical!r} (give one of {list(alternatives)})")
            parts.append(f"<{canonical}>\n{value}\n</{canonical}>")
        return "\n".join(parts)

    def get_format_str(self) -> str:
        """The tags, one block per field; a field with alternatives reads ``<[ a | b ]>``."""
        blocks = []
        for _canonical, alternatives in self._fields:
            tag = alternatives[0] if len(alternatives) == 1 else f"[ {' | '.join(alternatives)} ]"
            blocks.append(f"<{tag}>\n...\n</{tag}>")
        return "\n".join(blocks)

    def _message_format_score(self, text: str) -> float:
        """One message's format score, as the classic library scores it: 0.4 times the share of
        fields present (a parsed tag, or a lone opening or closing one), once any field parses;
        0.2 for spacing (the tags' surrounding whitespace is never part of a value, so always);
        0.2 when the message starts with a tag of the first field; 0.2 when it ends with a closing
        tag of the last field."""
        parsed = vars(self.parse(text))
        parsed_any = False
        present = 0
        for _canonical, alternatives in self._fields:
            found = False
            for alt in alternatives:
                if parsed.get(alt) is not None:
                    parsed_any = found = True
                elif f"<{alt}>" in text or f"</{alt}>" in text:
                    found = True
            present += found
        score = 0.4 * (present / len(self._fields)) if parsed_any else 0.0
        score += 0.2
        stripped = text.strip()
        if any(stripped.startswith(f"<{alt}>") for alt in self._fields[0][1]):
            score += 0.2
        if any(stripped.endswith(f"</{alt}>") for alt in self._fields[-1][1]):
            score += 0.2
        return score

    def get_format_reward_func(self) -> Callable[..., float]:
        def format_reward_func(completion: Any = None, **kwargs: Any) -> float:
            if isinstance(completion, str):
                return self._message_format_score(completion)
            msgs = self.get_assistant_messages(completion)
            if not msgs or not self._fields:
                return 0.0
            return sum(self._message_format_score(message_text(m.get("content"))) for m in msgs) / len(msgs)

        return format_reward_func

    def __repr__(self) -> str:
        return f"XMLParser(fields={[a if len(a) > 1 else c for c, a in self._fields]!r}, answer_field={self.answer_field!r})"

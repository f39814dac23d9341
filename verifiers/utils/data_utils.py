"""Datasets without the ``datasets`` import tax, answer extractors, and small built-in example sets.

Environments accept a ``datasets.Dataset``, a list of row dicts, a dict of columns, or a zero-argument
callable that builds any of those lazily. The rollout engine works on plain Python rows, converted
once (``Dataset`` row access is slow and must stay out of the hot path).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

__all__ = [
    "EXAMPLE_DATASETS",
    "extract_boxed_answer",
    "extract_hash_answer",
    "is_hf_dataset",
    "load_example_dataset",
    "rows_from_source",
]


# ----------------------------------------------------------------------------------------------------
# Answer extractors
# ----------------------------------------------------------------------------------------------------


def extract_boxed_answer(text: str | None) -> str:
    r"""The content of the last ``\boxed{...}`` in ``text`` (nested braces allowed).

    Returns ``text`` unchanged when it holds no complete ``\boxed{}``.

    >>> extract_boxed_answer(r"so the answer is \boxed{\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> extract_boxed_answer("42")
    '42'
    """
    if not text:
        return text or ""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        j = i
        while j < len(text):
            ch = text[j]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[i:j].strip()
            j += 1
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try an earlier one
    return text


def extract_hash_answer(text: str | None) -> str | None:
    """The part after ``####`` (GSM8K's answer format), or ``None`` when there is none.

    >>> extract_hash_answer("3 + 4 = 7\\n#### 7")
    '7'
    """
    if text is None or "####" not in text:
        return None
    return text.split("####", 1)[1].strip().replace(",", "")


# ----------------------------------------------------------------------------------------------------
# Dataset sources
# ----------------------------------------------------------------------------------------------------


def is_hf_dataset(obj: Any) -> bool:
    """True for a ``datasets.Dataset`` (checked without importing ``datasets``)."""
    return type(obj).__module__.startswith("datasets") and hasattr(obj, "to_list") and hasattr(obj, "column_names")


def rows_from_source(source: Any) -> list[dict[str, Any]]:
    """Plain row dicts from a Dataset, a list of rows, a dict of columns, or a zero-arg callable."""
    if source is None:
        return []
    if callable(source) and not is_hf_dataset(source) and not isinstance(source, list | tuple | Mapping):
        source = source()
    if is_hf_dataset(source):
        return source.to_list()
    if isinstance(source, Mapping):
        columns = {k: list(v) for k, v in source.items()}
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"dataset columns have different lengths: { {k: len(v) for k, v in columns.items()} }")
        n = lengths.pop() if lengths else 0
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    rows = list(source)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"dataset row {i} is a {type(row).__name__}, expected a dict")
    return [r if type(r) is dict else dict(r) for r in rows]


def source_columns(source: Any) -> list[str] | None:
    """Column names when they are known without building anything (None for lazy callables)."""
    if is_hf_dataset(source):
        return list(source.column_names)
    if isinstance(source, Mapping):
        return list(source.keys())
    if isinstance(source, list | tuple):
        return list(source[0].keys()) if source and isinstance(source[0], Mapping) else []
    return None


# ----------------------------------------------------------------------------------------------------
# Built-in example sets (generated offline, deterministic per split)
# ----------------------------------------------------------------------------------------------------

_NAMES = ["Ava", "Ben", "Chen", "Dana", "Eli", "Farah", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena"]
_ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "shells", "coins"]


def _gsm8k_row(rng: random.Random) -> dict[str, str]:
    name, other = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    kind = rng.randrange(4)
    a, b, c = rng.randint(3, 40), rng.randint(2, 12), rng.randint(2, 9)
    if kind == 0:
        q = f"{name} has {a} {item}. {other} gives {name} {b} more, and then {name} buys {c} packs of {b} {item} each. How many {item} does {name} have now?"
        ans = a + b + c * b
        work = f"{a} + {b} = {a + b}. {c} * {b} = {c * b}. {a + b} + {c * b} = {ans}."
    elif kind == 1:
        total = a * c
        q = f"{name} shares {total} {item} equally among {c} friends. Each friend gives {b if b < a else 1} back. How many {item} does each friend keep?"
        give = b if b < a else 1
        ans = a - give
        work = f"{total} / {c} = {a}. {a} - {give} = {ans}."
    elif kind == 2:
        price = rng.randint(2, 15)
        q = f"A pack of {item} costs ${price}. {name} buys {c} packs and pays with a ${price * c + a} bill. How much change does {name} get?"
        ans = a
        work = f"{price} * {c} = {price * c}. {price * c + a} - {price * c} = {a}."
    else:
        q = f"{name} reads {b} pages a day for {c} days, then {a} pages on the last day. How many pages did {name} read in total?"
        ans = b * c + a
        work = f"{b} * {c} = {b * c}. {b * c} + {a} = {ans}."
    return {"question": q, "answer": str(ans), "solution": f"{work}\n#### {ans}"}


def _frac_tex(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    return f"{sign}\\frac{{{abs(x.numerator)}}}{{{x.denominator}}}"


def _math_row(rng: random.Random) -> dict[str, str]:
    kind = rng.randrange(3)
    if kind == 0:
        p, q = Fraction(rng.randint(1, 9), rng.randint(2, 9)), Fraction(rng.randint(1, 9), rng.randint(2, 9))
        question = f"Compute ${_frac_tex(p)} + {_frac_tex(q)}$. Give your answer as a reduced fraction."
        answer = _frac_tex(p + q)
    elif kind == 1:
        a, x, b = rng.randint(2, 9), rng.randint(-10, 10), rng.randint(-20, 20)
        question = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}$."
        answer = str(x)
    else:
        n = rng.randint(3, 12)
        question = f"What is the sum of the first {n} positive odd integers?"
        answer = str(n * n)
    return {"question": question, "answer": answer}


def _reverse_row(rng: random.Random) -> dict[str, str]:
    words = rng.sample(["alpha", "river", "stone", "cloud", "maple", "ember", "quartz", "violet", "tundra", "harbor"], 3)
    text = " ".join(words)
    return {"question": f"Reverse the following text character by character: {text}", "answer": text[::-1]}


EXAMPLE_DATASETS: dict[str, Callable[[random.Random], dict[str, str]]] = {
    "gsm8k": _gsm8k_row,
    "math": _math_row,
    "reverse_text": _reverse_row,
}

_SIZES = {"train": 500, "test": 100, "eval": 100, "validation": 100}


def load_example_dataset(name: str = "gsm8k", split: str | None = "train", n: int | None = None, **_: Any) -> Any:
    """A small example dataset, generated offline and deterministically (no download).

    ``name``: ``"gsm8k"`` (arithmetic word problems; ``answer`` is the number), ``"math"``
    (fractions and linear equations; LaTeX answers), ``"reverse_text"``. Returns a
    ``datasets.Dataset`` with ``question`` and ``answer`` columns (a list of dicts if ``datasets`` is
    not installed), as the classic helper did.
    """
    key = name.split("/")[-1].lower().replace("-", "_")
    aliases = {"openai_gsm8k": "gsm8k", "math500": "math", "math_500": "math", "competition_math": "math"}
    key = aliases.get(key, key)
    if key not in EXAMPLE_DATASETS:
        raise ValueError(f"unknown example dataset {name!r}; available: {sorted(EXAMPLE_DATASETS)}")
    split = split or "train"
    size = n if n is not None else _SIZES.get(split, 100)
    rng = random.Random(f"{key}:{split}")
    rows = [EXAMPLE_DATASETS[key](rng) for _ in range(size)]
    try:
        from datasets import Dataset
    except ImportError:  # pragma: no cover - datasets is a core dependency
        return rows
    return Dataset.from_list(rows)

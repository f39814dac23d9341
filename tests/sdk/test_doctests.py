"""The examples in docstrings are tests: every module of ``verifiers/`` and ``environments/`` that
has ``>>>`` examples runs them here."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted([*(ROOT / "verifiers").rglob("*.py"), *(ROOT / "environments").glob("*/*.py")]):
        if ">>>" not in path.read_text():
            continue
        if path.is_relative_to(ROOT / "environments"):
            names.append(path.stem)  # bundled environments import by their module name
        else:
            rel = path.relative_to(ROOT).with_suffix("")
            names.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    return names


MODULES = _modules_with_examples()


def test_the_shared_helpers_are_among_them() -> None:
    assert {"verifiers.ids", "verifiers.utils.extract", "verifiers.checking"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has '>>>' but no example ran"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see the output above)"

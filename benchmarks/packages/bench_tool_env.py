"""The benchmarks' classic tool environment (``benchmarks/orchestrator.py``): a ``vf.ToolEnv`` with
one ``add`` tool, two model turns (the tool call, then the answer) and an exact-answer reward. The
in-process orchestrator runs it in its own event loop; an env-server pool serves it by this file's
path, through the one loader, as v1 episodes."""

from __future__ import annotations

from typing import Any


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


def answer_is(completion: Any, answer: str, **kw: Any) -> float:
    return 1.0 if str(completion[-1].get("content", "")).strip() == answer else 0.0


def load_environment(num_rows: int = 4096, **kwargs: Any) -> Any:
    from datasets import Dataset

    import verifiers as vf

    rows = [{"question": f"{i}: 2+3?", "answer": "5"} for i in range(num_rows)]
    return vf.ToolEnv(dataset=Dataset.from_list(rows), tools=[add], max_turns=4, rubric=vf.Rubric(funcs=[answer_is]), **kwargs)

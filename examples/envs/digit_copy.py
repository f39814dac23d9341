"""digit-copy: the tiny environment that `vf train examples/tiny.toml` learns.

The user message is a short string of digits (one by default) and the answer is its LAST digit,
written back alone.
A randomly initialised 359-token character model almost never does that (reward ~0.005); a model
that learned to attend to the right position does it every time. Small, offline, deterministic, and
hard enough that the learning curve is visible.

Reward: 1.0 for exactly the right digit; 0.2 for a single wrong digit (partial credit that gives a
randomly initialised policy some gradient toward the answer format); 0 otherwise.
"""

from __future__ import annotations

import random

import verifiers as vf


def make_rows(n: int, length: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        rows.append({"question": digits, "answer": digits[-1]})
    return rows


def copy_reward(completion, answer: str, **kwargs) -> float:
    """1.0 for the exact digit, 0.2 for another single digit, else 0.

    >>> copy_reward([{"role": "assistant", "content": "7"}], "7")
    1.0
    """
    if isinstance(completion, list):
        text = completion[-1].get("content") if completion else ""
    else:
        text = completion
    text = (text or "").strip()
    if text == answer:
        return 1.0
    if len(text) == 1 and text.isdigit():
        return 0.2
    return 0.0


def load_environment(num_examples: int = 1000, length: int = 1, seed: int = 0, **kwargs) -> vf.Environment:
    from datasets import Dataset

    dataset = Dataset.from_list(make_rows(num_examples, length, seed))
    rubric = vf.Rubric(funcs=[copy_reward], weights=[1.0])
    return vf.SingleTurnEnv(dataset=dataset, rubric=rubric, **kwargs)

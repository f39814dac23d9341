"""math-problems: references score 1, wrong and malformed answers score 0, rollouts run end to end."""

from __future__ import annotations

import asyncio

import math_problems as mp
import pytest
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_every_reference_answer_scores_one(level: int) -> None:
    rows = mp.build_rows(list(mp.DEFAULT_SOURCES), 68, level, seed=5)
    assert {r["info"]["family"] for r in rows} == set(mp.DEFAULT_SOURCES)
    for row in rows:
        reward = asyncio.run(mp.correct_answer(_chat(f"so \\boxed{{{row['answer']}}}"), row["answer"], row["info"]))
        assert reward == 1.0, row


def test_wrong_and_malformed_answers_score_zero() -> None:
    rows = mp.build_rows(list(mp.DEFAULT_SOURCES), 34, 2, seed=1)
    junk = ["\\boxed{123456789}", "the answer is 7", "\\boxed{", "\\boxed{}", "\\boxed{" + "9" * 5000 + "}",
            "\\boxed{\\frac{1}{0}}", ""]
    for row in rows:
        for text in junk:
            assert asyncio.run(mp.correct_answer(_chat(text), row["answer"], row["info"])) == 0.0, (row, text)
    # Inputs of the wrong type never raise.
    assert asyncio.run(mp.correct_answer(None, None, None)) == 0.0
    assert asyncio.run(mp.correct_answer([{"role": "user"}], "3", "not json")) == 0.0
    assert asyncio.run(mp.correct_answer([42, "x"], "3", {"source": "reasoning_gym"})) == 0.0


def test_equivalent_forms_are_accepted() -> None:
    assert mp.score_answer("0.5", "1/2") == 1.0
    assert mp.score_answer("\\frac{6}{4}", "3/2") == 1.0
    assert mp.score_answer("-3", "-3") == 1.0
    assert mp.score_answer("3", "-3") == 0.0
    assert mp.extract_boxed("a \\boxed{1} then \\boxed{\\frac{2}{3}}") == "\\frac{2}{3}"


def test_splits_are_deterministic_and_disjoint() -> None:
    env = mp.load_environment(num_train_examples=60, num_eval_examples=30, difficulty="easy")
    assert isinstance(env, vf.Environment)
    train, evaluation = env.get_dataset(), env.get_eval_dataset()
    assert len(train) == 60 and 0 < len(evaluation) <= 30
    assert not set(train["question"]) & set(evaluation["question"])
    again = mp.load_environment(num_train_examples=60, num_eval_examples=30, difficulty="easy")
    assert list(again.get_dataset()["question"]) == list(train["question"])
    with pytest.raises(ValueError):
        mp.load_environment(difficulty="impossible")
    with pytest.raises(ValueError):
        mp.build_rows(["no_such_family"], 3, 1, 0)


def test_rollouts_reward_reference_and_not_junk() -> None:
    env = mp.load_environment(num_train_examples=8, num_eval_examples=8, sources=["arithmetic", "gcd"])
    answers = {row["question"]: row["answer"] for row in env.get_eval_dataset()}

    def policy(request):  # answers correctly unless the question mentions 'gcd'-style wording
        question = request.messages[-1]["content"]
        return f"Working... \\boxed{{{answers[question]}}}"

    with ScriptedServer(policy) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
        out = env.evaluate_sync(client, "scripted-model", num_examples=8, rollouts_per_example=1)
    rewards = [o["reward"] for o in out["outputs"]]
    assert rewards == [1.0] * 8
    with ScriptedServer("I think it is \\boxed{-99999}") as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
        out = env.evaluate_sync(client, "scripted-model", num_examples=8, rollouts_per_example=1)
    assert [o["reward"] for o in out["outputs"]] == [0.0] * 8
    assert all(o["metrics"]["boxed_format"] == 1.0 for o in out["outputs"])

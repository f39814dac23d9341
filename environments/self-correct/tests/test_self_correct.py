"""self-correct: verdicts without leaks, decaying reward per attempt, bounded retries."""

from __future__ import annotations

import pytest
import self_correct as sc
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer


@pytest.fixture(scope="module")
def env() -> vf.Environment:
    return sc.load_environment(num_train_per_family=2, num_eval_per_family=1, max_attempts=3, decay=0.5)


def _answers(env: vf.Environment) -> dict[str, str]:
    return {r["question"]: r["answer"] for r in env.get_eval_dataset()}


def _run(env: vf.Environment, script, n: int = 12) -> list[dict]:
    with ScriptedServer(script) as server:
        return env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=n)["outputs"]


def test_reference_answers_pass_every_checker() -> None:
    for row in sc.build_rows(sc.DEFAULT_FAMILIES, 3, seed=9):
        assert sc.is_correct(row["info"], row["answer"]), row
        assert not sc.is_correct(row["info"], "definitely wrong ###")
    for info in (None, "junk", {}, {"family": "gcd", "seed": "x"}):
        assert sc.is_correct(info, "1") is False


def test_right_first_time_earns_full_reward(env: vf.Environment) -> None:
    answers = _answers(env)
    outputs = _run(env, lambda req: f"<answer>{answers[req.messages[1]['content']]}</answer>")
    assert [o["reward"] for o in outputs] == [1.0] * 12
    assert all(o["metrics"]["attempts_used"] == 1.0 for o in outputs)


def test_a_correction_on_the_second_try_earns_the_decayed_reward(env: vf.Environment) -> None:
    answers = _answers(env)

    def second_try(req):
        if req.turn == 0:
            return "<answer>wrong</answer>"
        assert "incorrect" in req.messages[-1]["content"]
        assert answers[req.messages[1]["content"]] not in req.messages[-1]["content"]  # no leak
        return f"<answer>{answers[req.messages[1]['content']]}</answer>"

    outputs = _run(env, second_try)
    assert [o["reward"] for o in outputs] == [0.5] * 12
    assert all(o["metrics"]["solved_first_try"] == 0.0 for o in outputs)


def test_always_wrong_or_untagged_stops_after_max_attempts(env: vf.Environment) -> None:
    for script in ("<answer>nope</answer>", "I refuse to use tags"):
        outputs = _run(env, script, n=4)
        for o in outputs:
            assert o["reward"] == 0.0
            assert o["metrics"]["attempts_used"] == 3.0
            assert o["error"] is None


def test_arguments_are_validated() -> None:
    assert sc.attempt_reward(2, 0.5) == 0.5
    with pytest.raises(ValueError):
        sc.load_environment(decay=2.0)
    with pytest.raises(ValueError):
        sc.load_environment(families=["game_of_life_halting"])

"""judge-qa: a scripted judge server grades answers; rule checks gate and cap the reward."""

from __future__ import annotations

import re

import judge_qa as jq
from openai import AsyncOpenAI

from verifiers.testing import ScriptedServer


def fair_judge(request) -> str:
    """Says yes when the candidate contains the reference (what a good judge would do here)."""
    prompt = request.messages[-1]["content"]
    blocks = re.findall(r"```\n(.*?)\n```", prompt, re.DOTALL)
    reference, candidate = blocks[1], blocks[2]
    return "yes" if reference.lower() in candidate.lower() else "no"


def _run(script: object, judge_script: object = fair_judge, n: int = 6, **env_args: object) -> tuple[list, ScriptedServer]:
    with ScriptedServer(judge_script) as judge, ScriptedServer(script) as model:
        env = jq.load_environment(num_train_examples=4, num_eval_examples=n,
                                  judge_client=AsyncOpenAI(base_url=judge.base_url, api_key="x"), **env_args)
        answers = {r["question"]: r["answer"] for r in env.get_eval_dataset()}
        if callable(script) and getattr(script, "needs_answers", False):
            script.answers = answers  # type: ignore[attr-defined]
        out = env.evaluate_sync(AsyncOpenAI(base_url=model.base_url, api_key="x"), "m", num_examples=n)
    return out["outputs"], judge


class Answerer:
    """Answers correctly, in a sentence (so only a judge, not exact match, accepts it)."""

    needs_answers = True

    def __init__(self, padding: int = 0) -> None:
        self.answers: dict[str, str] = {}
        self.padding = padding

    def __call__(self, request) -> str:
        answer = self.answers[request.messages[1]["content"]]
        return f"<answer>It was {answer}{' indeed' * self.padding}.</answer>"


def test_correct_answers_get_full_reward_through_the_judge() -> None:
    outputs, judge = _run(Answerer())
    assert [o["reward"] for o in outputs] == [1.0] * 6
    assert all(o["metrics"]["judge_correct"] == 1.0 for o in outputs)
    assert judge.request_count == 6  # graded_answer and judge_correct share one cached judge call


def test_wrong_answers_score_zero_and_untagged_ones_skip_the_judge() -> None:
    outputs, judge = _run("<answer>Something else entirely</answer>")
    assert all(o["reward"] == 0.0 for o in outputs)
    outputs, judge = _run("The answer is 1843 but I forgot the tags")
    assert all(o["reward"] == 0.0 and o["metrics"]["has_answer_tag"] == 0.0 for o in outputs)
    assert judge.request_count == 0


def test_long_correct_answers_earn_half() -> None:
    outputs, _ = _run(Answerer(padding=40), max_words=30)
    assert [o["reward"] for o in outputs] == [0.5] * 6


def test_judge_failure_is_recorded_not_silently_scored() -> None:
    outputs, _ = _run(Answerer(), judge_script={"status": 500, "error": "judge down"})
    for o in outputs:
        assert o["reward"] == 0.0
        assert o["error"] is not None


def test_rule_helpers() -> None:
    assert jq.judge_says_yes("Yes, the same fact") and not jq.judge_says_yes("no")
    assert jq.contains_reference("It was 1843.", "1843")
    assert not jq.contains_reference("18430", "1843")
    for junk in (None, 3, [], [{"role": "assistant", "content": None}]):
        assert jq.extract_answer(junk) is None
    rows = jq.build_rows(50, 3)
    assert all(r["answer"] in r["info"]["passage"] for r in rows)

"""Rubrics: keyword injection, group functions, weights, error recording, judge, math."""

from __future__ import annotations

import re
from typing import Any

import verifiers as vf


def make_state(completion: str, answer: str = "4", **extra: Any) -> vf.State:
    return vf.State(
        prompt=[{"role": "user", "content": "What is 2+2?"}],
        completion=[{"role": "assistant", "content": completion}],
        answer=answer, task="default", info={"level": 1}, example_id=0, error=None,
        timing={"scoring_ms": 0.0}, **extra,
    )


async def test_reward_functions_get_only_named_keywords() -> None:
    seen: dict[str, Any] = {}

    def exact(completion, answer, parser) -> float:
        return 1.0 if parser.parse_answer(completion) == answer else 0.0

    async def uses_info(info, difficulty, helper) -> float:
        seen.update(info=info, difficulty=difficulty, helper=helper)
        return 0.5

    def catch_all(**kwargs) -> float:
        seen["kwargs"] = set(kwargs)
        return 1

    rubric = vf.Rubric(funcs=[exact, uses_info], weights=[1.0, 2.0])
    rubric.add_metric(catch_all)
    rubric.add_class_object("helper", "H")
    states = [make_state("4", difficulty="hard")]
    await rubric.score_group(states)
    st = states[0]
    assert st["metrics"] == {"exact": 1.0, "uses_info": 0.5, "catch_all": 1.0}
    assert st["reward"] == 1.0 + 2.0 * 0.5  # metric has weight 0
    assert seen["difficulty"] == "hard" and seen["helper"] == "H" and seen["info"] == {"level": 1}
    assert {"prompt", "completion", "answer", "state", "parser", "task", "info", "helper"} <= seen["kwargs"]
    assert st["error"] is None


async def test_group_reward_functions_see_the_whole_group() -> None:
    def rank(completions, answers, states) -> list[float]:
        lengths = [len(c[-1]["content"]) for c in completions]
        return [1.0 if n == min(lengths) else 0.0 for n in lengths]

    rubric = vf.Rubric(funcs=[rank])
    states = [make_state("four"), make_state("4"), make_state("the answer is 4")]
    await rubric.score_group(states)
    assert [s["reward"] for s in states] == [0.0, 1.0, 0.0]


async def test_raising_reward_function_is_recorded_not_silent() -> None:
    def fine(completion) -> float:
        return 1.0

    def broken(completion) -> float:
        raise ValueError("boom")

    rubric = vf.Rubric(funcs=[fine, broken])
    states = [make_state("4")]
    await rubric.score_group(states)
    st = states[0]
    assert st["reward"] == 0.0
    assert st["error"] == {"type": "ValueError", "message": "boom", "source": "reward:broken", "kind": "reward"}
    assert st["metrics"] == {"fine": 1.0, "broken": 0.0}


async def test_parser_errors_are_attributed_to_the_parser() -> None:
    def bad_extract(text: str) -> str:
        raise RuntimeError("cannot parse")

    rubric = vf.Rubric(funcs=[lambda completion, parser: parser.parse_answer(completion) == "4"], parser=vf.Parser(bad_extract))
    states = [make_state("4")]
    await rubric.score_group(states)
    assert states[0]["error"]["source"] == "parser" and states[0]["error"]["type"] == "RuntimeError"


async def test_non_numeric_reward_is_an_error() -> None:
    rubric = vf.Rubric(funcs=[lambda completion: "yes"])
    states = [make_state("4")]
    await rubric.score_group(states)
    assert states[0]["error"]["type"] == "TypeError"


async def test_a_weight_zero_function_may_log_a_dict_of_metrics() -> None:
    # public environments log a per-dimension breakdown next to the reward this way (the classic
    # Rubric documents dict[str, float] as a return type); the reward is the other functions'
    def correct(completion, answer) -> float:
        return 1.0 if completion[-1]["content"] == answer else 0.0

    def breakdown(completion) -> dict:
        return {"score/length": 0.25, "accepted": True}

    rubric = vf.Rubric(funcs=[correct, breakdown], weights=[1.0, 0.0])
    states = [make_state("4")]
    await rubric.score_group(states)
    st = states[0]
    assert st["error"] is None and st["reward"] == 1.0
    assert st["metrics"] == {"correct": 1.0, "breakdown": 0.0, "score/length": 0.25, "accepted": 1.0}
    # with a weight its share of the reward is undefined: an error, as is an entry that is no number
    for funcs, weights, message in (
        ([correct, breakdown], [1.0, 0.5], "returned a dict of metrics but has weight 0.5"),
        ([lambda completion: {"x": "high"}], [0.0], "reward function '<lambda>\\[x\\]' returned str"),
        ([lambda completion: {"x": float("nan")}], [0.0], "expected a finite number"),
    ):
        states = [make_state("4")]
        await vf.Rubric(funcs=funcs, weights=weights).score_group(states)
        assert states[0]["reward"] == 0.0 and states[0]["error"]["type"] in ("TypeError", "ValueError")
        assert re.search(message, states[0]["error"]["message"]), states[0]["error"]


async def test_rubric_group_sums_and_old_score_rollouts() -> None:
    a = vf.Rubric(funcs=[lambda completion: 1.0], weights=[0.5])
    b = vf.Rubric(funcs=[lambda answer: 2.0])
    group = vf.RubricGroup([a, b])
    states = [make_state("4")]
    await group.score_group(states)
    assert states[0]["reward"] == 0.5 + 2.0
    assert len(group.get_reward_func_names()) == 2
    scores = await b.score_rollouts(["p"], ["c"], ["a"], [{}], ["default"], [{}])
    assert scores.reward == [2.0] and list(scores.metrics.values()) == [[2.0]]
    one = await a.score_rollout("p", "c", "a", {})
    assert one.reward == 0.5


async def test_judge_rubric_with_openai_client(server_factory) -> None:
    from openai import AsyncOpenAI

    srv = server_factory(lambda req: "yes" if "4" in req.messages[-1]["content"] else "no")
    client = AsyncOpenAI(base_url=srv.base_url, api_key="test")
    rubric = vf.JudgeRubric(judge_client=client, judge_model="judge-m")

    async def judged(judge, prompt, completion, answer, state) -> float:
        verdict = await judge(prompt, completion, answer, state)
        again = await judge(prompt, completion, answer, state)  # cached: no second call
        assert verdict == again
        return 1.0 if verdict == "yes" else 0.0

    rubric.add_reward_func(judged)
    states = [make_state("4"), make_state("5", answer="6")]
    await rubric.score_group(states)
    await client.close()
    assert [s["reward"] for s in states] == [1.0, 0.0]  # the judge says yes when it sees a 4
    assert srv.request_count == 2
    assert srv.requests[0].model == "judge-m"
    assert "What is 2+2?" in srv.requests[0].messages[0]["content"]
    assert all(isinstance(s["judge_response"], dict) for s in states)


async def test_judge_failure_is_recorded_with_source_judge(server_factory) -> None:
    from verifiers.testing import error

    srv = server_factory(error(401, "bad key"))
    rubric = vf.JudgeRubric(judge_client=vf.ModelClient(base_url=srv.base_url, max_retries=0))

    async def judged(judge, prompt, completion, answer, state) -> float:
        return 1.0 if "yes" in await judge(prompt, completion, answer, state) else 0.0

    rubric.add_reward_func(judged)
    states = [make_state("4")]
    await rubric.score_group(states)
    assert states[0]["reward"] == 0.0
    assert states[0]["error"]["source"] == "judge" and "bad key" in states[0]["error"]["message"]


async def test_math_rubric() -> None:
    rubric = vf.MathRubric()
    states = [
        make_state(r"<think>1/2 + 1/4</think> The answer is \boxed{\frac{3}{4}}", answer=r"\frac{3}{4}"),
        make_state(r"\boxed{0.75}", answer=r"\frac{3}{4}"),
        make_state(r"\boxed{2}", answer="3"),
        make_state("no answer", answer="3"),
    ]
    await rubric.score_group(states)
    assert [s["metrics"]["correct_answer"] for s in states] == [1.0, 1.0, 0.0, 0.0]
    assert all(s["error"] is None for s in states)


async def test_math_rubric_enforces_its_own_timeout(monkeypatch) -> None:
    import asyncio
    import threading

    from verifiers.rubrics import math_rubric

    entered = threading.Event()
    release = threading.Event()

    def stuck(response: str, answer: str) -> bool:
        entered.set()
        release.wait(120)  # held until the test lets go: only the rubric's own timeout can end the wait
        return True  # a rubric that waited for this would score 1.0

    monkeypatch.setattr(math_rubric, "verify_math", stuck)
    rubric = vf.MathRubric(timeout_seconds=0.1)
    states = [make_state(r"\boxed{1}", answer="1")]
    try:
        await asyncio.wait_for(rubric.score_group(states), timeout=60)  # only stops a hung test
        finished_while_stuck = not release.is_set()
    finally:
        release.set()
    assert entered.is_set() and finished_while_stuck
    assert states[0]["reward"] == 0.0 and states[0]["error"] is None


def test_math_verify_runs_off_the_main_thread() -> None:
    import threading

    from verifiers.rubrics.math_rubric import verify_math

    box = {}
    t = threading.Thread(target=lambda: box.update(ok=verify_math(r"\frac{2}{4}", "0.5")))
    t.start()
    t.join(30)
    assert box == {"ok": True}

"""reasoning-mix: ratios decide the row counts; each row is routed to and scored by its member."""

from __future__ import annotations

import pytest
import reasoning_mix as rm
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer


def test_allocation_adds_up_and_follows_ratios() -> None:
    assert rm.allocate(100, rm.DEFAULT_RATIOS) == {"math-problems": 40, "logic-puzzles": 30, "self-correct": 20,
                                                   "wordle": 10}
    assert sum(rm.allocate(13, {"a": 0.7, "b": 0.2, "c": 0.1}).values()) == 13
    for bad in ({}, {"a": -1.0}, {"a": 0.0}):
        with pytest.raises(ValueError):
            rm.allocate(10, bad)
    with pytest.raises(ValueError):
        rm.load_environment(ratios={"reasoning-mix": 1.0})


def test_mixture_rows_route_to_their_members_and_score_there() -> None:
    env = rm.load_environment(ratios={"math-problems": 0.5, "wordle": 0.5}, num_train_examples=20,
                              num_eval_examples=6, member_args={"math-problems": {"sources": ["arithmetic"]}})
    assert isinstance(env, vf.Environment)
    train = env.get_dataset()
    tasks = [row["task"] for row in train]
    assert tasks.count("math-problems") == 10 and tasks.count("wordle") == 10
    evaluation = env.get_eval_dataset()
    answers = {row["prompt"][-1]["content"]: (row["task"], row["answer"]) for row in evaluation}

    def policy(request):
        task, answer = answers[request.messages[1]["content"]] if request.messages[1]["content"] in answers else (
            "wordle", None)
        if task == "math-problems":
            return f"\\boxed{{{answer}}}"
        # Wordle rows share one opening question: find the secret from the row order instead.
        return f"<guess>{request_secret(request)}</guess>"

    secrets = [row["answer"] for row in evaluation if row["task"] == "wordle"]

    def request_secret(request) -> str:
        # Guess each hidden word in turn; a wrong one gets feedback and the next is tried.
        tried = sum(1 for m in request.messages if m.get("role") == "assistant")
        return secrets[tried % len(secrets)]

    with ScriptedServer(policy) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    by_task: dict[str, list[dict]] = {}
    for o in out["outputs"]:
        by_task.setdefault(o["task"], []).append(o)
    assert set(by_task) == {"math-problems", "wordle"}
    assert all(o["reward"] == 1.0 for o in by_task["math-problems"])
    assert all(o["metrics"]["solved_reward"] == 1.0 for o in by_task["wordle"])  # found within 6 tries
    for o in out["outputs"]:  # every member's metrics are present on every row
        assert {"correct_answer", "solved_reward"} <= set(o["metrics"])

"""logic-puzzles: references get full marks from each family's checker, junk gets little, rollouts run."""

from __future__ import annotations

import logic_puzzles as lp
import pytest
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer

# Families whose answers are a single short token (Yes/No, 0/1, a small count): a junk guess can be
# right by chance there, so they are left out of the "junk scores low" check.
GUESSABLE = {"circuit_logic", "self_reference", "syllogism", "aiw", "course_schedule"}


def _say(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return lp.build_rows(dict.fromkeys(lp.DEFAULT_FAMILIES, 6), seed=3)


def test_reference_answers_get_full_marks(rows: list[dict]) -> None:
    with_reference = [r for r in rows if r["answer"]]
    assert {r["info"]["family"] for r in with_reference} >= set(lp.DEFAULT_FAMILIES) - {
        "propositional_logic", "graph_color"}
    for row in with_reference:
        assert lp.puzzle_score(_say(f"thinking...\n<answer>{row['answer']}</answer>"), row["info"]) == 1.0, row


def test_junk_and_malformed_answers_score_low_and_never_raise(rows: list[dict]) -> None:
    junk = ["<answer>junk</answer>", "<answer></answer>", "no tags at all", "<answer>" + "z" * 60_000 + "</answer>",
            "<answer>\x00\x01 ∨∧ {[(</answer>"]
    for row in rows:
        for text in junk:
            score = lp.puzzle_score(_say(text), row["info"])
            assert 0.0 <= score <= 1.0
            if row["info"]["family"] not in GUESSABLE:
                assert score <= 0.25, (row["info"]["family"], text, score)
        # Without the answer tags even the right answer scores nothing: the format is part of the task.
        if row["answer"]:
            assert lp.puzzle_score(_say(row["answer"]), row["info"]) == 0.0
    for info in (None, "not json", {"family": "maze"}, {"family": "nope", "seed": 1, "size": 1, "config": "{}",
                                                        "index": 0}):
        assert lp.puzzle_score(_say("<answer>1</answer>"), info) == 0.0
    assert lp.puzzle_score(None, rows[0]["info"]) == 0.0


def test_family_selection_and_exclusions() -> None:
    env = lp.load_environment(families={"maze": 4, "knights_knaves": 3}, num_eval_per_family=2)
    assert isinstance(env, vf.Environment)
    train = env.get_dataset()
    assert len(train) == 7
    assert sorted(i["family"] for i in train["info"]) == ["knights_knaves"] * 3 + ["maze"] * 4
    assert len(env.get_eval_dataset()) == 4
    with pytest.raises(ValueError, match="excluded"):
        lp.load_environment(families=["game_of_life_halting"])
    with pytest.raises(ValueError, match="unknown"):
        lp.load_environment(families=["not_a_family"])


def test_rollouts_score_reference_policy_top_and_junk_low() -> None:
    env = lp.load_environment(families=["maze", "knights_knaves", "n_queens"], num_eval_per_family=2)
    answers = {r["question"]: r["answer"] for r in env.get_eval_dataset()}

    def solver(request):
        return f"Let me think.\n<answer>{answers[request.messages[-1]['content']]}</answer>"

    with ScriptedServer(solver) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    assert [o["reward"] for o in out["outputs"]] == [1.0] * 6
    with ScriptedServer("<answer>no idea</answer>") as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    assert all(o["reward"] == 0.0 for o in out["outputs"])

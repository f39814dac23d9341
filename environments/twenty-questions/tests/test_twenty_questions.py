"""twenty-questions: the table is winnable, the answerer is sound, a bisecting player always wins."""

from __future__ import annotations

import pytest
import twenty_questions as tq
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer


def bisector(request) -> str:
    """A good player: ask the property that best splits the remaining candidates, then guess."""
    candidates = set(tq.OBJECTS)
    asked: list[str] = []
    messages = request.messages
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        move = tq.parse_move(m.get("content"))
        reply = messages[i + 1].get("content") if i + 1 < len(messages) else ""
        if move and move[0] == "question":
            prop = tq.properties_in(move[1])[0]
            asked.append(prop)
            yes = reply.startswith("Yes")
            candidates = {o for o in candidates if (prop in tq.OBJECTS[o]) == yes}
        elif move and move[0] == "guess":
            candidates.discard(tq.match_object(move[1]))
    if len(candidates) == 1:
        return f"<guess>{next(iter(candidates))}</guess>"
    best = min((p for p in tq.PROPERTIES if p not in asked),
               key=lambda p: abs(2 * sum(p in tq.OBJECTS[o] for o in candidates) - len(candidates)))
    return f"Let me narrow it down. <question>{tq.PROPERTIES[best][0]}</question>"


def test_every_object_has_a_distinct_profile_and_every_property_is_recognised() -> None:
    assert len(set(tq.OBJECTS.values())) == len(tq.OBJECTS)
    for name, (question, _) in tq.PROPERTIES.items():
        assert tq.properties_in(question) == [name]
    for name in tq.OBJECTS:
        assert tq.match_object(f"Is it a {name}?") == name
        assert tq.parse_move(f"<guess>{name.upper()}</guess>") == ("guess", name.upper())


def test_answers_follow_the_table_and_junk_is_handled() -> None:
    assert tq.answer_question("Is it a mammal?", "whale") == ("Yes.", True)
    assert tq.answer_question("Can it fly?", "penguin") == ("No.", False)
    assert tq.answer_question("Is it a mammal that lives in water?", "dog") == ("No.", False)
    assert tq.answer_question("What colour is it?", "dog")[1] is None
    assert tq.parse_move("<question>Is it a cat?</question>") == ("guess", "Is it a cat?")
    for junk in (None, "", "no tags", "<question></question>", "<guess>"):
        move = tq.parse_move(junk)
        assert move is None or move[0] in ("question", "guess")
    for state in ({}, {"solved": None}, {"solved": True, "turns_used": 40}):
        assert 0.0 <= tq.efficiency_reward(state) <= 1.0
        assert tq.solved_reward(state) in (0.0, 1.0)
    with pytest.raises(ValueError, match="same property profile"):
        tq.load_environment(objects={"a": ["alive"], "b": ["alive"]})
    with pytest.raises(ValueError, match="unknown properties"):
        tq.load_environment(objects={"a": ["glows"]})


def test_a_custom_table_is_used_without_touching_the_built_in_one() -> None:
    before = dict(tq.OBJECTS)
    env = tq.load_environment(objects={"kettle": ["man_made", "kitchen", "metal"], "lizard": ["alive", "animal", "legs"]},
                              num_eval_objects=1, train_repeats=1)
    assert tq.OBJECTS == before
    hidden = env.get_eval_dataset()["answer"][0]
    other = ({"kettle", "lizard"} - {hidden}).pop()
    script = ["<question>Is it alive?</question>", f"<guess>{other}</guess>", f"<guess>{hidden}</guess>"]
    with ScriptedServer(lambda req: script[req.turn]) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=1)
    o = out["outputs"][0]
    assert o["metrics"]["solved_reward"] == 1.0 and o["metrics"]["turns_used"] == 3.0
    assert o["completion"][1]["content"].startswith("Yes." if hidden == "lizard" else "No.")


@pytest.fixture(scope="module")
def env() -> vf.Environment:
    return tq.load_environment(num_eval_objects=8, train_repeats=1)


def test_held_out_objects_never_appear_in_training(env: vf.Environment) -> None:
    assert not set(env.get_dataset()["answer"]) & set(env.get_eval_dataset()["answer"])


def test_a_bisecting_player_always_wins_quickly(env: vf.Environment) -> None:
    with ScriptedServer(bisector) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=8)
    for o in out["outputs"]:
        assert o["metrics"]["solved_reward"] == 1.0, o["completion"]
        assert o["metrics"]["turns_used"] <= 10
        assert o["metrics"]["unanswerable_questions"] == 0.0
        assert o["reward"] > 1.2


def test_a_player_who_never_asks_properly_scores_zero(env: vf.Environment) -> None:
    with ScriptedServer("Is it bigger than a galaxy?") as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=2)
    for o in out["outputs"]:
        assert o["reward"] == 0.0
        assert o["metrics"]["turns_used"] == 20.0
        assert o["error"] is None

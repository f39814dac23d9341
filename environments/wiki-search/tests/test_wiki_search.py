"""wiki-search: a consistent world, a working BM25 index, tools end to end, EM/F1 scoring."""

from __future__ import annotations

import random

import pytest
import wiki_search as ws
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer, tool_call, tool_calls


@pytest.fixture(scope="module")
def world() -> ws.World:
    return ws.generate_world(0)


def test_generation_is_deterministic_and_questions_are_answerable(world: ws.World) -> None:
    assert ws.write_articles(ws.generate_world(0)) == ws.write_articles(world)
    articles = ws.write_articles(world)
    questions = ws.make_questions(world, random.Random(0))
    assert len(questions) >= 400
    assert {q["hops"] for q in questions} == {2, 3}
    for q in questions:
        # Every hop is an article, and the answer is written in the last article on the path (or
        # is a name that has its own article).
        assert all(title in articles for title in q["path"])
        assert q["answer"] in articles[q["path"][-1]] or q["answer"] in articles, q


def test_search_ranks_the_named_article_first_and_survives_fts_syntax(world: ws.World) -> None:
    book = ws.Encyclopedia(ws.write_articles(world))
    for person in world.people[:10]:
        assert book.search(person["name"])[0][0] == person["name"]
    for nasty in ['"', "AND OR NOT", "title:x", "*", "NEAR(a b)", "", "a" * 10_000, "'; DROP TABLE pages; --"]:
        assert isinstance(book.search(nasty), list)
    assert book.read(world.cities[0]["name"].upper()) is not None
    assert book.read("No Such Article") is None


def test_em_and_f1() -> None:
    assert ws.em_reward([{"role": "assistant", "content": "<answer>the Velor River</answer>"}], "Velor River") == 1.0
    assert ws.em_reward([{"role": "assistant", "content": "<answer>Velor</answer>"}], "Velor River") == 0.0
    assert 0.6 < ws.f1_reward([{"role": "assistant", "content": "<answer>Velor</answer>"}], "Velor River") < 0.7
    for junk in (None, [], "", [{"role": "assistant", "content": None}], [{"role": "user", "content": "x"}], 42):
        assert ws.em_reward(junk, "Velor") == 0.0
        assert ws.f1_reward(junk, "Velor") == 0.0


def test_a_researching_policy_gets_full_marks_and_a_guesser_none() -> None:
    env = ws.load_environment(num_train_examples=10, num_eval_examples=6)
    assert isinstance(env, vf.Environment)
    rows = {r["question"]: r for r in env.get_eval_dataset()}

    def researcher(request):
        row = rows[request.messages[1]["content"]]
        path = row["info"]["path"]
        step = request.turn
        if step == 0:
            return tool_calls(tool_call("search", {"query": path[0]}, id="s0"))
        if step <= len(path):
            return tool_calls(tool_call("read", {"title": path[step - 1]}, id=f"r{step}"))
        return f"<answer>{row['answer']}</answer>"

    with ScriptedServer(researcher) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    for o in out["outputs"]:
        assert o["reward"] == 1.0 and o["metrics"]["f1_reward"] == 1.0
        tool_texts = [m["content"] for m in o["completion"] if m["role"] == "tool"]
        assert tool_texts and "No article titled" not in "".join(tool_texts)
    with ScriptedServer("<answer>Atlantis</answer>") as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    assert all(o["reward"] == 0.0 for o in out["outputs"])

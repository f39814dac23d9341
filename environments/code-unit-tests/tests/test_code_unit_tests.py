"""code-unit-tests: references pass in the sandbox, stubs and junk fail, rollouts score end to end."""

from __future__ import annotations

import asyncio

import code_unit_tests as cut
import pytest
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer


def _fence(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```"


@pytest.fixture(scope="module")
def scorer() -> cut.UnitTestScorer:
    return cut.UnitTestScorer(max_concurrent=4)


def _score_all(scorer: cut.UnitTestScorer, pairs: list[tuple[str, dict]]) -> list[float]:
    async def go() -> list[float]:
        return list(await asyncio.gather(*(scorer.fraction_passed(text, info) for text, info in pairs)))

    return asyncio.run(go())


def test_humaneval_ships_164_problems_split_into_asserts() -> None:
    rows = cut.humaneval_rows()
    assert len(rows) == 164
    assert sum(len(r["info"]["tests"]) > 1 for r in rows) >= 150


def test_references_pass_and_stubs_fail(scorer: cut.UnitTestScorer) -> None:
    generated = cut.build_procedural_rows(12, seed=4)  # one task per template
    humaneval = list(cut.humaneval_rows())[::8]  # 21 problems spread over the set
    refs = [(_fence(r["answer"]), r["info"]) for r in generated + humaneval]
    assert _score_all(scorer, refs) == [1.0] * len(refs)
    # A body-only reply (HumanEval completion style) works too.
    body_only = [(r["answer"][len(r["info"]["prompt"]):], r["info"]) for r in humaneval[:5]]
    assert _score_all(scorer, body_only) == [1.0] * 5
    stubs = [(_fence(f"def {r['info']['entry_point']}(*args, **kwargs):\n    return None"), r["info"])
             for r in humaneval]
    stub_scores = _score_all(scorer, stubs)
    assert max(stub_scores) < 1.0 and sum(stub_scores) / len(stub_scores) < 0.15
    # the tests ran in warm sandboxes (reused, never replaced: every reset was clean)
    assert scorer.sandbox.pool.started >= 1 and scorer.sandbox.pool.discarded == 0


def test_malicious_and_malformed_replies_score_zero(scorer: cut.UnitTestScorer) -> None:
    row = cut.build_procedural_rows(1, seed=1)[0]
    junk = [
        "no code here at all",
        "",
        _fence("def broken(:\n    pass"),
        _fence("import os\nos._exit(0)"),
        _fence("while True:\n    pass"),
        _fence("print('x' * 10**8)"),
        _fence("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)"),
    ]
    assert _score_all(scorer, [(text, row["info"]) for text in junk]) == [0.0] * len(junk)
    assert _score_all(scorer, [(None, row["info"]), (_fence("x = 1"), None), (_fence("x = 1"), "not json")]) == [0.0] * 3


def test_rollouts_reward_modes() -> None:
    env = cut.load_environment(num_eval_examples=4, reward_mode="all")
    assert isinstance(env, vf.Environment)
    refs = {r["question"]: r["answer"] for r in env.get_eval_dataset()}
    with ScriptedServer(lambda req: _fence(refs[req.messages[-1]["content"]])) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=4)
    assert [o["reward"] for o in out["outputs"]] == [1.0] * 4
    with ScriptedServer(_fence("def nothing():\n    return 0")) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=4)
    assert [o["reward"] for o in out["outputs"]] == [0.0] * 4
    with pytest.raises(ValueError):
        cut.load_environment(reward_mode="most")

"""python-tool: a tool-using policy solves problems in the sandboxed REPL; sessions never leak."""

from __future__ import annotations

import json

import pytest
import python_tool as pt
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer, tool_call, tool_calls


@pytest.fixture(scope="module")
def env() -> vf.Environment:
    return pt.load_environment(num_train_examples=4, num_eval_examples=8, cell_timeout=15)


def test_integer_matching_and_bad_input() -> None:
    assert pt.correct_answer([{"role": "assistant", "content": "<answer>1,234</answer>"}], "1234") == 1.0
    assert pt.correct_answer([{"role": "assistant", "content": "<answer>1235</answer>"}], "1234") == 0.0
    for junk in (None, "", [], [{"role": "assistant", "content": None}], "<answer>" + "9" * 5000 + "</answer>",
                 [{"role": "assistant", "content": "<answer>1e3</answer>"}]):
        assert pt.correct_answer(junk, "1000") == 0.0
    with pytest.raises(ValueError):
        pt.load_environment(kinds=["nonsense"])


def test_a_tool_using_policy_solves_every_kind(env: vf.Environment) -> None:
    rows = {r["question"]: r for r in env.get_eval_dataset()}
    assert len({r["info"]["kind"] for r in rows.values()}) == 8

    def policy(request):
        row = rows[request.messages[1]["content"]]
        if request.turn == 0:
            # Split the computation over two cells: the interpreter must persist between them.
            return tool_calls(tool_call("python", {"code": "import io, contextlib\nbuf = io.StringIO()"}, id="c0"))
        if request.turn == 1:
            code = f"with contextlib.redirect_stdout(buf):\n    exec({json.dumps(row['info']['reference_code'])})\nbuf.getvalue()"
            return tool_calls(tool_call("python", {"code": code}, id="c1"))
        result = request.messages[-1]["content"]
        digits = "".join(ch for ch in result if ch.isdigit())
        return f"The tool says {result!r}. <answer>{digits}</answer>"

    with ScriptedServer(policy) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=8)
    for o in out["outputs"]:
        assert o["reward"] == 1.0, o["completion"]
        assert o["metrics"]["tool_calls_made"] == 2.0
    assert env._sessions == {}  # every rollout's interpreter was closed
    # each rollout's interpreter ran in a warm sandbox, reset and handed back afterwards
    pool = env.sandbox.pool
    assert pool.started >= 1 and pool.discarded == 0 and len(pool.pids()) <= pool.size


def test_hostile_code_is_contained_and_reported(env: vf.Environment) -> None:
    hostile = ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)", "while True:\n    pass",
               "open('/etc/shadow').read()")

    def policy(request):
        if request.turn < len(hostile):
            return tool_calls(tool_call("python", {"code": hostile[request.turn]}, id=f"h{request.turn}"))
        return "<answer>0</answer>"

    env_fast = pt.load_environment(num_eval_examples=1, cell_timeout=3)
    with ScriptedServer(policy) as server:
        out = env_fast.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=1)
    o = out["outputs"][0]
    tool_texts = [m["content"] for m in o["completion"] if m["role"] == "tool"]
    assert len(tool_texts) == 3
    assert "Error" in tool_texts[0] or "error" in tool_texts[0].lower()
    assert "killed" in tool_texts[1]
    assert "Error" in tool_texts[2]
    assert o["reward"] == 0.0
    assert env_fast._sessions == {}

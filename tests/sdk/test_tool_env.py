"""ToolEnv / StatefulToolEnv: concurrent tool calls, bad calls answered as tool messages."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import verifiers as vf
from verifiers.testing import by_turn, tool_call, tool_calls

#: The four tool calls of one turn meet here: each waits until all four have started, which happens
#: only when they run at the same time. Run one at a time, the first would wait alone until the
#: barrier's timeout (a guard against hanging, not a measurement) broke it and every call failed.
FOUR_CALLS = threading.Barrier(4, timeout=60)


def gated_square(x: int) -> int:
    """Square a number once all four calls of the turn are running (sync: runs in the lane of sync
    environment code, beside the async calls on the loop).

    Args:
        x: The number.
    """
    FOUR_CALLS.wait()
    return x * x


async def gated_double(x: int) -> int:
    """Double a number once all four calls of the turn are running (async).

    Args:
        x: The number.
    """
    await asyncio.to_thread(FOUR_CALLS.wait)
    return 2 * x


async def slow_double(x: int) -> int:
    """Double a number slowly (async).

    Args:
        x: The number.
    """
    await asyncio.sleep(0.3)
    return 2 * x


def fail(msg: str) -> str:
    """Always fails.

    Args:
        msg: Message.
    """
    raise RuntimeError(msg)


class Fatal(Exception):
    pass


def fatal() -> str:
    """Fails fatally."""
    raise Fatal("stop everything")


async def test_tool_calls_of_one_turn_run_concurrently(server_factory) -> None:
    calls = tool_calls(
        tool_call("gated_square", {"x": 3}, id="a"),
        tool_call("gated_double", {"x": 4}, id="b"),
        tool_call("gated_double", {"x": 5}, id="c"),
        tool_call("gated_double", {"x": 6}, id="d"),
    )
    srv = server_factory(by_turn(calls, "done"))
    env = vf.ToolEnv(tools=[gated_square, gated_double], dataset=[{"question": "q"}])
    FOUR_CALLS.reset()
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    tool_msgs = [m for m in st["completion"] if m["role"] == "tool"]
    # each result exists only because all four calls were in flight together (the sync one in the
    # lane; two sync ones would run one after the other there, as the original runs them)
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [("a", "9"), ("b", "8"), ("c", "10"), ("d", "12")]
    assert not FOUR_CALLS.broken
    assert st["stop_condition"] == "no_tools_called" and st["turn"] == 2


async def test_bad_tool_calls_become_tool_messages(server_factory) -> None:
    calls = tool_calls(
        tool_call("slow_double", "{not json", id="bad-json"),
        tool_call("no_such_tool", {}, id="unknown"),
        tool_call("slow_double", {"y": 1}, id="bad-args"),
        tool_call("fail", {"msg": "kaput"}, id="raises"),
        tool_call("slow_double", "[1, 2]", id="not-object"),
    )
    srv = server_factory(by_turn(calls, "ok"))
    env = vf.ToolEnv(tools=[slow_double, fail], dataset=[{"question": "q"}])
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    msgs = {m["tool_call_id"]: m["content"] for m in st["completion"] if m["role"] == "tool"}
    # the model reads each exception's own text, as the classic library's default error_formatter writes it
    assert msgs["bad-json"] == "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    assert msgs["unknown"] == "'no_such_tool'"  # the tool lookup's KeyError, as 0.1.7 and 0.3.0 send it
    assert "got an unexpected keyword argument 'y'" in msgs["bad-args"] and not msgs["bad-args"].startswith("Error")
    assert msgs["raises"] == "kaput"
    assert msgs["not-object"] == "slow_double() argument after ** must be a mapping, not list"
    assert st["error"] is None and st["stop_condition"] == "no_tools_called"
    # the model saw the explanations on its next turn
    assert sum(1 for m in srv.requests[1].messages if m["role"] == "tool") == 5


async def test_stop_errors_end_the_rollout(server_factory) -> None:
    srv = server_factory(by_turn(tool_calls(tool_call("fatal", {}, id="f")), "never"))
    env = vf.ToolEnv(tools=[fatal], dataset=[{"question": "q"}], stop_errors=[Fatal])
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    assert st["error"]["source"] == "tool:fatal" and st["error"]["type"] == "Fatal"
    assert st["stop_condition"] == "has_error" and srv.request_count == 1
    assert st["reward"] == 0.0


async def test_model_reply_without_content(server_factory) -> None:
    from verifiers.testing import Reply

    srv = server_factory(Reply(content=None))
    env = vf.ToolEnv(tools=[slow_double], dataset=[{"question": "q", "answer": "x"}],
                     rubric=vf.Rubric(funcs=[lambda completion, answer, parser: float(parser.parse_answer(completion) == answer)]))
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    assert st["error"] is None and st["reward"] == 0.0 and st["completion"][0]["content"] is None


class SandboxLike(vf.StatefulToolEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_tool(self.run_code, args_to_skip=["session_id"])

    async def setup_state(self, state, **kwargs):
        state["session_id"] = f"session-{state['example_id']}"
        return state

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs) -> dict:
        return {**tool_args, "session_id": state["session_id"]}

    def run_code(self, code: str, session_id: str) -> str:
        """Run code in the session.

        Args:
            code: Source code.
            session_id: Hidden session handle.
        """
        return f"{session_id}: {code} on {threading.current_thread().name}"


async def test_stateful_tool_env_injects_hidden_args(server_factory) -> None:
    srv = server_factory(by_turn(tool_calls(tool_call("run_code", {"code": "print(1)"}, id="r")), "ok"))
    env = SandboxLike(dataset=[{"question": "q"}, {"question": "q2"}])
    params = env.oai_tools[0]["function"]["parameters"]
    assert list(params["properties"]) == ["code"] and params["required"] == ["code"]
    out = await env.evaluate(srv.base_url, "m")
    for st in out.state:
        tool_msg = st["completion"][1]
        assert tool_msg["content"].startswith(f"session-{st['example_id']}: print(1) on vf-sync")
    assert "session_id" not in srv.requests[0].tools[0]["function"]["parameters"]["properties"]

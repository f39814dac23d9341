"""SandboxEnv / PythonEnv rollouts against a scripted model server that calls the tools."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer, by_turn, tool_call, tool_calls

from .conftest import run_dirs
from .support import wait_until_gone, wait_until_present

pytestmark = pytest.mark.sandbox


@pytest.fixture
def server_factory() -> Iterator[Any]:
    started: list[ScriptedServer] = []

    def make(script: Any) -> ScriptedServer:
        srv = ScriptedServer(script).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


def tool_messages(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["completion"] if m["role"] == "tool"]


def bash(command: str, call_id: str) -> dict[str, Any]:
    return tool_call("bash", {"command": command}, id=call_id)


def python(code: str, call_id: str) -> dict[str, Any]:
    return tool_call("python", {"code": code}, id=call_id)


async def test_sandbox_env_rollout_runs_bash_in_a_persistent_work_dir(server_factory: Any) -> None:
    srv = server_factory(
        by_turn(
            tool_calls(bash("echo hello > note.txt && cat note.txt", "c1")),
            tool_calls(bash("cat note.txt; id -u; cat /etc/shadow", "c2")),
            tool_calls(bash("true", "c3")),
            "the note says hello",
        )
    )

    class Checked(vf.SandboxEnv):
        async def post_rollout(self, state: vf.State) -> None:
            session = self.get_session(state)
            state["note"] = (await session.read_file("note.txt")).decode()

    def note_written(state: vf.State) -> float:
        return 1.0 if state.get("note") == "hello\n" else 0.0

    env = Checked(
        dataset=[{"question": "write a note", "answer": "hello"}], rubric=vf.Rubric(funcs=[note_written])
    )
    schema = env.oai_tools
    assert [t["function"]["name"] for t in schema] == ["bash"]
    assert set(schema[0]["function"]["parameters"]["properties"]) == {"command"}

    out = await env.evaluate(srv.base_url, "m")
    state = out.state[0]
    assert state["error"] is None, state["error"]
    messages = tool_messages(state)
    assert messages[0] == "hello"
    assert messages[1].startswith("hello\n65534\nstderr:\n")
    assert "No such file" in messages[1]
    assert messages[2] == "(no output)"
    assert out.reward == [1.0]
    assert len(state["sandbox_state"]["command_execution_times"]) == 3
    assert env.active_sandboxes == {}
    assert run_dirs() == []


async def test_concurrent_rollouts_get_separate_sandboxes(server_factory: Any) -> None:
    srv = server_factory(
        by_turn(
            tool_calls(bash("ls; echo mine > mine.txt; ls", "c1")),
            "done",
        )
    )
    env = vf.SandboxEnv(dataset=[{"question": "q"}])
    out = await env.evaluate(srv.base_url, "m", rollouts_per_example=6)
    assert [tool_messages(s) for s in out.state] == [["mine.txt"]] * 6  # none saw another's file
    assert len({s["sandbox_id"] for s in out.state}) == 6
    assert run_dirs() == []


async def test_sandbox_env_command_timeout_message(server_factory: Any) -> None:
    srv = server_factory(by_turn(tool_calls(bash("sleep 30", "c1")), "gave up"))
    env = vf.SandboxEnv(dataset=[{"question": "q"}], timeout_per_command_seconds=1)
    out = await env.evaluate(srv.base_url, "m")
    assert tool_messages(out.state[0]) == ["Error: Command timed out after 1s"]


async def test_python_env_keeps_state_across_tool_calls(server_factory: Any) -> None:
    srv = server_factory(
        by_turn(
            tool_calls(python("x = 21\nprint('set')", "c1")),
            tool_calls(python("x * 2", "c2")),
            tool_calls(python("import numpy\nint(numpy.arange(4).sum())", "c3")),
            tool_calls(python("1 / 0", "c4")),
            "42",
        )
    )
    env = vf.PythonEnv(dataset=[{"question": "double 21", "answer": "42"}], pip_install_packages="numpy")
    assert [t["function"]["name"] for t in env.oai_tools] == ["python"]
    assert set(env.oai_tools[0]["function"]["parameters"]["properties"]) == {"code"}
    out = await env.evaluate(srv.base_url, "m")
    state = out.state[0]
    assert state["error"] is None, state["error"]
    messages = tool_messages(state)
    assert messages[0] == "set"
    assert messages[1] == "Out[2]: 42"
    assert messages[2] == "Out[3]: 6"
    assert "ZeroDivisionError" in messages[3] and messages[3].startswith("Traceback")
    assert "python_state" not in state  # dropped by the cleanup hook, as in the classic class
    assert run_dirs() == []


async def test_python_env_timeout_restarts_the_interpreter(server_factory: Any) -> None:
    srv = server_factory(
        by_turn(
            tool_calls(python("y = 1", "c1")),
            tool_calls(python("while True:\n    pass", "c2")),
            tool_calls(python("'y' in globals()", "c3")),
            "done",
        )
    )
    env = vf.PythonEnv(dataset=[{"question": "q"}], timeout_per_command_seconds=1, pip_install_packages="")
    out = await env.evaluate(srv.base_url, "m")
    messages = tool_messages(out.state[0])
    assert messages[1].startswith("Error: execution timed out after 1s")
    assert messages[2].endswith("Out[3]: False")


async def test_cancelled_rollout_closes_its_sandbox(server_factory: Any) -> None:
    marker = f"3{secrets.randbelow(10**6)}.5"
    srv = server_factory(by_turn(tool_calls(bash(f"sleep {marker}", "c1")), "done"))
    env = vf.SandboxEnv(dataset=[{"question": "q"}], timeout_per_command_seconds=120)
    task = asyncio.create_task(env.evaluate(srv.base_url, "m"))
    assert await wait_until_present(marker, timeout=30)
    assert run_dirs()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(marker) == []
    assert run_dirs() == []
    assert env.active_sandboxes == {}


async def test_teardown_closes_leftover_sessions() -> None:
    env = vf.SandboxEnv(dataset=[{"question": "q"}])
    state = vf.State({"prompt": [], "completion": []}) if hasattr(vf, "State") else {}
    await env.setup_state(state)
    session = env.active_sandboxes[state["sandbox_id"]]
    assert json.loads(json.dumps(state["sandbox_state"]))["ready"] is True
    await env.aclose()
    assert session.closed
    assert env.active_sandboxes == {}
    assert run_dirs() == []

"""MCP toolsets end to end: real server processes (the ``mcp`` package's FastMCP over stdio, or
streamable HTTP / SSE at a URL), the v1 taskset ``vf-mcp-tools`` run by ``run_v1`` against the
scripted loopback model server, which calls the tools. No server process outlives its run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.services import free_port, wait_for_port
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.errors import ToolsetError
from verifiers.v1.rollout import run_v1

pytest.importorskip("mcp", reason="the toolset tests need the mcp package (verifiers[compat])")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in "ZX"


def _exists(path: str) -> bool:
    return Path(path).exists()


def _our_tool_servers() -> list[int]:
    """Live children of this process that are toolset servers."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"verifiers.v1.mcp" in cmdline and _alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def _numbers(req) -> tuple[int, int]:
    first_user = next(m for m in req.messages if m["role"] == "user")
    a, b = re.search(r"(\d+) \+ (\d+)", first_user["content"]).groups()
    return int(a), int(b)


def _last_tool(req) -> dict | None:
    last = req.messages[-1]
    return last if last["role"] == "tool" else None


async def _run(config: dict, script, **kw):
    env = load_environment(config)
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model", **kw)
        finally:
            await client.aclose()
    return out, [st["_episode"].traces[0] for st in out.state if st.get("_episode") is not None]


async def test_a_per_rollout_server_answers_and_the_reward_uses_it() -> None:
    seen_tools = []

    def script(req):
        tool = _last_tool(req)
        a, b = _numbers(req)
        if tool is None:
            seen_tools.append(sorted(t["function"]["name"] for t in req.tools))
            return tool_calls(tool_call("calc_whoami", {}, id="who"))
        if tool["tool_call_id"] == "who":
            return tool_calls(tool_call("calc_chatty", {}, id="chat"))
        if tool["tool_call_id"] == "chat":
            return tool_calls(tool_call("calc_add", {"a": a, "b": b}, id="add"))
        return reply(tool["content"])  # the server's sum is the answer

    out, traces = await _run({"taskset": {"id": "vf-mcp-tools", "n": 3}}, script)
    assert [st["reward"] for st in out.state] == [1.0, 1.0, 1.0] and out["metadata"]["num_errors"] == 0
    assert seen_tools[0] == ["calc_add", "calc_big", "calc_boom", "calc_chatty", "calc_hang", "calc_hang_async", "calc_whoami"]
    pids, folders = [], []
    for trace in traces:
        who, chatty, added = (m.content for m in trace.tool_messages)
        pid, task, cwd = who.split(maxsplit=2)
        assert task == f"{trace.task.data.a}+{trace.task.data.b}"  # setup_task got this rollout's task
        assert cwd != trace.agent.runtime["workdir"]  # not colocated: a folder of its own
        folders.append(cwd)
        assert chatty == "still fine"  # a print() in a tool does not corrupt the stdio stream
        assert added == str(trace.task.data.a + trace.task.data.b)
        assert trace.rewards["correct"].score == 1.0 and trace.ok
        pids.append(int(pid))
    assert len(set(pids)) == 3 and len(set(folders)) == 3  # one server process per rollout
    assert not any(_alive(p) for p in pids) and _our_tool_servers() == []
    assert not any(map(_exists, folders))  # their folders went with them


async def test_a_colocated_server_runs_in_the_rollouts_folder() -> None:
    def script(req):
        tool = _last_tool(req)
        return tool_calls(tool_call("calc_whoami", {}, id="who")) if tool is None else reply(tool["content"])

    _, traces = await _run({"taskset": {"id": "vf-mcp-tools", "n": 1, "task": {"colocated": True}}}, script)
    (trace,) = traces
    pid, _, cwd = trace.tool_messages[0].content.split(maxsplit=2)
    assert cwd == trace.agent.runtime["workdir"]
    assert not _alive(int(pid))


async def test_a_shared_server_is_one_process_with_each_rollouts_own_state() -> None:
    def script(req):
        tool = _last_tool(req)
        a, b = _numbers(req)
        if tool is None:
            return tool_calls(tool_call("ledger_record", {"item": f"{a}-first"}, id="r1"))
        if tool["tool_call_id"] == "r1":
            return tool_calls(tool_call("ledger_record", {"item": f"{a}-second"}, id="r2"))
        if tool["tool_call_id"] == "r2":
            return tool_calls(tool_call("ledger_record_then_fail", {"item": f"{a}-lost"}, id="rf"))
        if tool["tool_call_id"] == "rf":
            return tool_calls(tool_call("calc_add", {"a": a, "b": b}, id="add"))
        return reply(tool["content"])

    config = {"taskset": {"id": "vf-mcp-tools", "n": 2, "shared": True}}
    out, traces = await _run(config, script, num_rollouts=3, max_concurrent=6)
    assert len(traces) == 6 and all(st["reward"] == 1.0 for st in out.state)
    ledger_pids = set()
    for trace in traces:
        a = trace.task.data.a
        # each rollout saw only its own items, though all six used one server at once
        # (and, as in the original, what a tool changed before it raised is dropped with it)
        assert trace.state.items == [f"{a}-first", f"{a}-second"]
        assert trace.metrics["ledger"] == 2.0
        assert [m.content for m in trace.tool_messages[:2]] == [f"1 items: {a}-first", f"2 items: {a}-first,{a}-second"]
        assert f"no room for {a}-lost" in trace.tool_messages[2].content
        ledger_pids.update(trace.state.pids)
    assert len(ledger_pids) == 1  # one shared server for the whole run
    (pid,) = ledger_pids
    assert not _alive(pid) and _our_tool_servers() == []  # closed at the run's end


SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("remote", host="127.0.0.1", port=int(sys.argv[1]), log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> str:
        \"\"\"Add two integers.\"\"\"
        return str(a + b)

    server.run(sys.argv[2])
    """
)


@pytest.fixture(params=[("streamable-http", "/mcp"), ("sse", "/sse")], ids=["streamable-http", "sse"])
def remote_server(request, tmp_path):
    """A FastMCP server of its own on 127.0.0.1 (the given transport); its URL."""
    transport, path = request.param
    script_file = tmp_path / "server.py"
    script_file.write_text(SERVER)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script_file), str(port), transport], stderr=subprocess.DEVNULL)
    try:
        wait_for_port("127.0.0.1", port, 60, proc)
        yield f"http://127.0.0.1:{port}{path}", proc
    finally:
        proc.kill()
        proc.wait()


async def test_a_url_toolset_reaches_a_server_already_running(remote_server) -> None:
    url, proc = remote_server

    def script(req):
        tool = _last_tool(req)
        if tool is None:
            assert [t["function"]["name"] for t in req.tools] == ["remote_add"]
            a, b = _numbers(req)
            return tool_calls(tool_call("remote_add", {"a": a, "b": b}, id="add"))
        return reply(tool["content"])

    out, traces = await _run({"taskset": {"id": "vf-mcp-tools", "n": 2, "task": {"url": url}}}, script)
    assert [st["reward"] for st in out.state] == [1.0, 1.0]
    assert [t.tool_messages[0].content for t in traces] == ["10", "12"]
    assert proc.poll() is None  # not ours to stop
    assert _our_tool_servers() == []  # nothing was launched


async def test_a_tool_that_raises_is_the_models_to_read_and_a_hang_is_a_recorded_error() -> None:
    pids, sizes = {}, []

    def script(req):
        tool = _last_tool(req)
        a, _ = _numbers(req)
        if tool is None:
            return tool_calls(tool_call("calc_boom", {}, id="boom"))
        if tool["tool_call_id"] == "boom":
            # the MCP server's own error text, as the original passes it on (no prefix of ours)
            assert tool["content"] == "Error executing tool boom: the calculator broke"
            return tool_calls(tool_call("calc_big", {"n": 250_000}, id="big"))
        if tool["tool_call_id"] == "big":
            sizes.append(len(tool["content"]))
            # a huge result is capped as the original caps it: its first and last 10,000 bytes
            assert "\n[... 230,000 of 250,000 bytes cut here ...]\n" in tool["content"]
            return tool_calls(tool_call("calc_whoami", {}, id="who"))
        pids[a] = int(tool["content"].split()[0])
        return tool_calls(tool_call("calc_hang" if a == 0 else "calc_hang_async", {}, id="hang"))

    config = {"taskset": {"id": "vf-mcp-tools", "n": 2}, "agent": {"harness": {"id": "null", "tool_timeout": 1}}}
    out, traces = await _run(config, script)
    assert len(out.state) == 2  # the run went on to its end
    for st, trace in zip(out.state, traces, strict=True):
        (noted,) = trace.info["tool_errors"]
        assert noted["tool"] == "calc_boom" and "the calculator broke" in noted["message"]
        assert trace.tool_messages[0].content == "Error executing tool boom: the calculator broke"  # what the model read
        (error,) = trace.errors
        name = "calc_hang" if trace.task.data.a == 0 else "calc_hang_async"
        assert error.type == "ToolsetError" and error.message == f"tool {name!r} did not finish within 1 s"
        assert trace.stop_condition == "toolset_error" and not trace.ok
        assert st["error"]["type"] == "ToolsetError"
    assert len(pids) == 2 and not any(_alive(p) for p in pids.values()) and _our_tool_servers() == []
    assert len(sizes) == 2 and all(20_000 < n < 20_100 for n in sizes)


async def test_a_cancelled_rollout_closes_its_server() -> None:
    pids = []

    def script(req):
        tool = _last_tool(req)
        if tool is None:
            return tool_calls(tool_call("calc_whoami", {}, id="who"))
        pids.append(int(tool["content"].split()[0]))
        return tool_calls(tool_call("calc_hang_async", {}, id="hang"))

    out, _ = await _run({"taskset": {"id": "vf-mcp-tools", "n": 1}}, script, timeout=8)
    (state,) = out.state
    assert state["error"] is not None and "timeout" in json.dumps(state["error"]).lower()
    assert len(pids) == 1 and not _alive(pids[0]) and _our_tool_servers() == []


async def test_a_server_that_fails_to_start_is_the_rollouts_error_with_its_stderr() -> None:
    _, traces = await _run({"taskset": {"id": "vf-mcp-tools", "n": 1, "task": {"broken": True}}}, lambda req: reply("x"))
    (trace,) = traces
    (error,) = trace.errors
    assert error.type == "ToolsetError" and "failed to start" in error.message
    assert "no index on this machine" in error.message  # the tail of the server's stderr
    assert trace.calls == [] and _our_tool_servers() == []  # the model was never called


def test_a_toolset_class_a_server_cannot_import_is_refused_in_one_line() -> None:
    import verifiers.v1 as vf
    from verifiers.v1.mcp.client import launched

    class Local(vf.Toolset[vf.ToolsetConfig]):
        pass

    with pytest.raises(ToolsetError, match="module-level class of an importable module"):
        launched(Local(vf.ToolsetConfig()), cwd=".", env={})


def test_without_the_mcp_package_the_error_says_how_to_get_it(monkeypatch) -> None:
    from verifiers.v1.mcp.client import MISSING_MCP, require_mcp

    monkeypatch.setitem(sys.modules, "mcp.client.stdio", None)  # what a missing package looks like
    with pytest.raises(ToolsetError) as info:
        require_mcp()
    assert str(info.value) == MISSING_MCP and "verifiers[compat]" in MISSING_MCP


def _processes_marked(mark: str) -> list[int]:
    """Live processes (anywhere, reparented or not) whose environment carries ``mark``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def test_vf_eval_runs_shared_and_per_rollout_toolsets_and_leaves_no_server(tmp_path) -> None:
    import uuid

    from tests.cli.helpers import REPO, run_vf
    from tests.v1.conftest import PACKAGES

    def script(req):
        tool = _last_tool(req)
        a, b = _numbers(req)
        if tool is None:
            return tool_calls(tool_call("ledger_record", {"item": str(a)}, id="rec"))
        if tool["tool_call_id"] == "rec":
            return tool_calls(tool_call("calc_add", {"a": a, "b": b}, id="add"))
        return reply(tool["content"])

    mark = f"VF_TEST_MARK={uuid.uuid4().hex}"
    with ScriptedServer(script) as srv:
        res = run_vf(
            "eval", "vf-mcp-tools", "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "-r", "2",
            "--env.taskset.shared", "true", "-o", str(tmp_path / "o"), cwd=tmp_path,
            env={"PYTHONPATH": f"{REPO}{os.pathsep}{PACKAGES}", mark.split("=")[0]: mark.split("=")[1]},
        )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = (tmp_path / "o").iterdir()
    lines = [json.loads(x) for x in (run / "traces.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(x["reward"] == 1.0 and x["error"] is None for x in lines)
    for line in lines:
        (trace,) = line["traces"]
        a, b = trace["task"]["data"]["a"], trace["task"]["data"]["b"]
        tool_texts = [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == "tool"]
        assert tool_texts == [f"1 items: {a}", str(a + b)]  # each rollout's own ledger, the server's sum
        assert trace["metrics"]["ledger"] == 1.0
        assert {t["name"] for t in trace["tools"]} >= {"calc_add", "ledger_record"}
    assert _processes_marked(mark) == []  # no tool server outlived `vf eval`


async def test_a_server_is_never_run_unisolated_in_place_of_another_runtime() -> None:
    from vf_mcp_tools import CalcToolset

    import verifiers.v1 as vf
    from verifiers.v1.mcp.client import open_toolset
    from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

    for kind in ("sandbox", "docker"):
        with pytest.raises(ToolsetError, match=f"runtime type '{kind}' is not supported for tool servers"):
            await open_toolset(CalcToolset(vf.ToolsetConfig(runtime={"type": kind})))
    with pytest.raises(ToolsetError, match="colocated servers run only beside a subprocess runtime"):
        await open_toolset(CalcToolset(vf.ToolsetConfig(colocated=True)), colocated_in=SandboxRuntime(SandboxConfig()))
    assert _our_tool_servers() == []


async def test_the_bash_harness_offers_the_toolsets_beside_its_own_tools() -> None:
    offered = []

    def script(req):
        tool = _last_tool(req)
        if tool is None:
            offered.append(sorted(t["function"]["name"] for t in req.tools))
            a, b = _numbers(req)
            return tool_calls(tool_call("calc_add", {"a": a, "b": b}, id="add"))
        return reply(tool["content"])

    out, _ = await _run({"taskset": {"id": "vf-mcp-tools", "n": 1}, "agent": {"harness": {"id": "bash"}}}, script)
    assert out.state[0]["reward"] == 1.0
    assert {"bash", "edit", "calc_add", "calc_whoami"} <= set(offered[0])
    assert _our_tool_servers() == []


def test_a_result_with_no_content_reads_as_the_original_writes_it() -> None:
    from mcp.types import TextContent

    from verifiers.v1.mcp.client import tool_content

    assert tool_content([]) == "[]"  # a tool that returned None
    assert tool_content([TextContent(type="text", text="")]) == ""  # one that returned ""


async def test_the_runs_shared_servers_are_up_before_the_env_starts_and_any_episode() -> None:
    """As the original serves them: the taskset's shared toolsets start with the run (their own
    setup before any task's), not at the first rollout that reaches for them."""
    env = load_environment({"taskset": {"id": "vf-mcp-tools", "n": 1, "shared": True}})
    at_start: list[list[int]] = []

    async def start() -> None:
        at_start.append(_our_tool_servers())

    env.start = start  # type: ignore[method-assign]
    async with ScriptedServer(lambda req: reply(str(sum(_numbers(req))))) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
    assert out.state[0]["reward"] == 1.0
    assert len(at_start) == 1 and len(at_start[0]) == 1  # the ledger server, already running
    assert _our_tool_servers() == []

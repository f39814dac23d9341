"""Harness plugins written the original's way: on the built-ins (a ``NullHarness`` subclass whose
``launch`` changes the task and calls ``super().launch``), on the shared chat program
(``verifiers.v1.harnesses.utils.launch``), and with a PEP 723 program of their own given by its
source (prepared and run in the runtime, its model traffic through the interception proxy)."""

from __future__ import annotations

import pytest

import verifiers.v1 as vf
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig
from verifiers.v1.harnesses import NullHarness, NullHarnessConfig
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program
from verifiers.v1.rollout import run_v1


class TagConfig(NullHarnessConfig):
    tag: str = "plain"


class TagHarness(NullHarness, vf.Harness[TagConfig]):
    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        data = data.model_copy(update={"prompt": f"[{self.config.tag}] {data.prompt}"})  # the task's text, first turn
        return await super().launch(ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)

    @vf.metric
    async def reply_words(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply.split()))


class PoliteConfig(vf.HarnessConfig):
    greeting: str = "Please be polite."


class PoliteHarness(vf.Harness[PoliteConfig]):
    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def setup(self, runtime):
        await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, self.config.resolved_env)

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, runtime, endpoint, secret,
                                         mcp_urls, f"{self.config.greeting} {system_prompt or ''}".strip(), prompt)  # fmt: skip


PROGRAM = """# /// script
# requires-python = ">=3.10"
# dependencies = []
# ///
import argparse, json, os, urllib.request
p = argparse.ArgumentParser()
for flag in ("--base-url", "--api-key", "--model", "--system-prompt", "--prompt", "--initial-messages-file", "--shout"):
    p.add_argument(flag, default="")
a = p.parse_args()
messages = [{"role": "system", "content": a.system_prompt}] if a.system_prompt else []
messages += json.load(open(a.initial_messages_file)) if a.initial_messages_file else [{"role": "user", "content": a.prompt}]
body = json.dumps({"model": a.model, "messages": messages}).encode()
req = urllib.request.Request(a.base_url + "/chat/completions", data=body,
                             headers={"content-type": "application/json", "authorization": "Bearer " + a.api_key})
with urllib.request.urlopen(req) as r:
    reply = json.load(r)["choices"][0]["message"]["content"]
print(reply.upper() if a.shout else reply, os.environ.get("OWN_VAR", ""))
"""


class OwnProgramHarness(vf.Harness[vf.HarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        result = await launch_chat_program(PROGRAM, self.config, ctx, trace, runtime, endpoint, secret, mcp_urls,
                                           system_prompt, prompt, extra_args=["--shout=1"])  # fmt: skip
        trace.info["stdout"] = result.stdout.strip()
        return result


async def _run(harness, srv, taskset: str = "vf-capitals", **spec):
    env = SingleAgentEnv(SingleAgentEnvConfig(taskset={"id": taskset, "n": 1}, **spec))
    env._harnesses["agent"] = harness
    client = ModelClient.from_any(srv.base_url)
    try:
        out = await run_v1(env, list(env.taskset), client, model="scripted-model")
    finally:
        await client.aclose()
    return out.state[0]["_episode"].traces[0]


async def test_a_null_harness_subclass_launch_is_run_and_its_metrics_recorded() -> None:
    async with ScriptedServer(lambda req: "Paris it is") as srv:
        trace = await _run(TagHarness(TagConfig(tag="shiny")), srv)
        (request,) = srv.requests
    assert request.messages[-1]["content"].startswith("[shiny] ")
    assert trace.ok and trace.metrics["reply_words"] == 3.0


async def test_a_harness_on_the_shared_chat_program_places_its_own_system_prompt() -> None:
    async with ScriptedServer(lambda req: "Paris") as srv:
        trace = await _run(PoliteHarness(PoliteConfig()), srv)
        (request,) = srv.requests
    roles = [m["role"] for m in request.messages]
    assert roles == ["system", "user"] and request.messages[0]["content"].startswith("Please be polite.")
    assert trace.ok and trace.last_reply == "Paris"


async def test_a_harness_program_given_by_its_source_runs_in_the_runtime_through_the_proxy(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = vf.HarnessConfig(id="own", env={"OWN_VAR": "from-env"})
    work = tmp_path / "work"
    async with ScriptedServer(lambda req: "paris") as srv:
        trace = await _run(OwnProgramHarness(config), srv, agent={"runtime": {"type": "subprocess", "workdir": str(work)}})
        (request,) = srv.requests
    assert trace.ok, trace.errors
    assert trace.info["stdout"] == "PARIS from-env" and trace.last_reply == "paris"
    # the first turn hands the program the task's text prompt (the original's --prompt, not a file)
    assert request.messages[-1] == {"role": "user", "content": "What is the capital of France? Answer with the city only."}
    assert len(trace.calls) == 1
    # the script lives in the user's cache, named by its content, outside the work folder
    assert len(list((tmp_path / "cache" / "verifiers" / "scripts").glob("*.py"))) == 1
    assert not (work / ".vf-scripts").exists()


TWICE = PROGRAM.replace("with urllib.request.urlopen(req) as r:", "urllib.request.urlopen(req).read()\nwith urllib.request.urlopen(req) as r:")


class TwiceHarness(OwnProgramHarness):
    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(TWICE, self.config, ctx, trace, runtime, endpoint, secret, mcp_urls, system_prompt, prompt)


async def test_a_program_that_exits_on_the_refusal_after_max_turns_is_not_a_failure(tmp_path) -> None:
    async with ScriptedServer(lambda req: "paris") as srv:
        trace = await _run(TwiceHarness(vf.HarnessConfig(id="twice")), srv,
                           agent={"max_turns": 1, "runtime": {"type": "subprocess", "workdir": str(tmp_path)}})  # fmt: skip
        assert srv.request_count == 1  # the second call was refused by the proxy
    assert trace.ok and trace.errors == [] and trace.stop_condition == "max_turns" and trace.rewards


class FoldingHarness(OwnProgramHarness):
    APPENDS_SYSTEM_PROMPT = False


async def test_a_harness_that_folds_the_system_prompt_gets_the_tasks_text(tmp_path) -> None:
    from verifiers.v1.envs.single_agent import SingleAgentEnv

    class Brief(SingleAgentEnv):
        async def run(self, task, agents):
            await agents.agent.run(task.with_data(system_prompt="Be brief."))

    async with ScriptedServer(lambda req: "paris") as srv:
        env = Brief(SingleAgentEnvConfig(taskset={"id": "vf-capitals", "n": 1}, agent={"runtime": {"type": "subprocess", "workdir": str(tmp_path)}}))
        env._harnesses["agent"] = FoldingHarness(vf.HarnessConfig(id="fold"))
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
        (request,) = srv.requests
    assert out.state[0]["_episode"].traces[0].ok
    assert [m["role"] for m in request.messages] == ["user"] and request.messages[0]["content"].startswith("Be brief.\n\nWhat is")


async def test_the_shared_chat_program_is_known_by_its_text_and_turns_keep_their_segments() -> None:
    """A source built on ``CHAT_PROGRAM_SOURCE`` is still the in-process program; over two turns of
    an interaction each segment holds that turn's reply only."""
    from verifiers.v1.envs.single_agent import SingleAgentEnv

    seen = []

    class Tweaked(PoliteHarness):
        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
            _system, prompt = self.resolve_prompt(data)
            return await launch_chat_program(CHAT_PROGRAM_SOURCE + "# a tweak\n", self.config, ctx, trace, runtime, endpoint,
                                             secret, mcp_urls, "Please be polite.", prompt)  # fmt: skip

    class TwoTurns(SingleAgentEnv):
        async def run(self, task, agents):
            async with agents.agent.interaction(task) as it:
                seen.append([m.role for m in (await it.turn()).messages])
                seen.append([m.role for m in (await it.turn("And of Spain?")).messages])

    replies = iter(["Paris", "Madrid"])
    async with ScriptedServer(lambda req: next(replies)) as srv:
        env = TwoTurns(SingleAgentEnvConfig(taskset={"id": "vf-capitals", "n": 1}))
        env._harnesses["agent"] = Tweaked(PoliteConfig())
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
        second = srv.requests[1].messages
    assert seen == [["assistant"], ["assistant"]]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"] and second[-1]["content"] == "And of Spain?"
    assert out.state[0]["_episode"].traces[0].last_reply == "Madrid"


class McpProgramHarness(OwnProgramHarness):
    SUPPORTS_MCP = True


class McpChatHarness(PoliteHarness):
    SUPPORTS_MCP = True


async def test_a_program_harness_takes_mcp_toolsets_through_the_shared_chat_program_only(tmp_path, monkeypatch) -> None:
    """The shared chat program is our loop: it offers the task's MCP toolsets. A program of its own
    gets no MCP config here, so it is refused before it runs, in one clear error, never silently
    left without the tools."""
    import re

    from verifiers.testing.scripted import reply, tool_call, tool_calls

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def script(req):
        if req.messages[-1]["role"] == "tool":
            return reply(req.messages[-1]["content"])
        a, b = map(int, re.findall(r"(\d+) \+ (\d+)", req.messages[-1]["content"] or "")[0])
        return tool_calls(tool_call("calc_add", {"a": a, "b": b}))

    async with ScriptedServer(script) as srv:
        trace = await _run(McpChatHarness(PoliteConfig()), srv, taskset="vf-mcp-tools")
    assert trace.ok and trace.rewards["correct"].score == 1.0, trace.errors
    assert any(m.name == "calc_add" for m in trace.tool_messages)
    async with ScriptedServer(script) as srv:
        trace = await _run(McpProgramHarness(vf.HarnessConfig(id="own")), srv, taskset="vf-mcp-tools")
        requests = srv.request_count
    assert not trace.ok and requests == 0
    assert [e.type for e in trace.errors] == ["HarnessError"] and "programs get no MCP config" in trace.errors[0].message


async def test_a_harness_that_makes_up_its_result_and_is_set_up_only_after_the_tasks_setup() -> None:
    """A harness that never calls the model returns ``ProgramResult(exit_code=0, ...)`` as harnesses
    written for the original do; its ``setup`` runs after the task's, and not at all when the
    task's setup failed (the run is over then)."""
    from verifiers.v1.runtimes import ProgramResult

    seen: list[str] = []

    class Quiet(vf.Harness[vf.HarnessConfig]):
        NEEDS_CONTAINER = False
        EXECUTES_CODE = False

        async def setup(self, runtime):
            seen.append("harness setup")

        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
            seen.append("launch")
            return ProgramResult(exit_code=0, stdout="", stderr="")

    env = SingleAgentEnv(SingleAgentEnvConfig(taskset={"id": "vf-capitals", "n": 1}))
    env._harnesses["agent"] = Quiet(vf.HarnessConfig())
    (task,) = list(env.taskset)

    class Unready(type(task)):
        async def setup(self, trace, runtime):
            seen.append("task setup")
            raise RuntimeError("no fixture")

    async with ScriptedServer(lambda req: "Paris") as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            good = (await run_v1(env, [task], client, model="scripted-model")).state[0]["_episode"].traces[0]
            assert seen == ["harness setup", "launch"] and good.ok and not good.errors
            seen.clear()
            bad = (await run_v1(env, [Unready(task.data)], client, model="scripted-model")).state[0]["_episode"].traces[0]
        finally:
            await client.aclose()
        assert srv.request_count == 0
    assert seen == ["task setup"]
    assert not bad.ok and (bad.errors[0].type, bad.errors[0].message) == ("TaskError", "task setup: RuntimeError: no fixture")
    with pytest.raises(TypeError, match="give one"):
        ProgramResult(1, "", "", exit_code=0)

    class Boom(Quiet):
        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
            raise RuntimeError("exploded")

    env._harnesses["agent"] = Boom(vf.HarnessConfig(id="boom"))
    async with ScriptedServer(lambda req: "Paris") as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            failed = (await run_v1(env, [task], client, model="scripted-model")).state[0]["_episode"].traces[0]
        finally:
            await client.aclose()
    assert (failed.errors[0].type, failed.errors[0].message) == ("HarnessError", "harness 'boom': RuntimeError: exploded")
    assert failed.stop_condition == "harness_error"

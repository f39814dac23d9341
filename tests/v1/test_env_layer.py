"""Envs and agents on the engine, against a real loopback model server (ScriptedServer)."""

from __future__ import annotations

import json
import re

import pytest

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.plugins import PluginError
from verifiers.v1.rollout import run_v1


def _sum_answer(request) -> str:
    m = re.search(r"(\d+) \+ (\d+)", request.messages[-1]["content"] or "")
    return str(int(m.group(1)) + int(m.group(2))) if m else "?"


async def _run(env, srv, **kw):
    client = ModelClient.from_any(srv.base_url)
    try:
        return await run_v1(env, list(env.taskset), client, model="scripted-model", **kw)
    finally:
        await client.aclose()


async def test_single_turn_reward_one_episode_a_line(tmp_path) -> None:
    env = load_environment({"taskset": {"id": "vf-sums", "n": 3}})
    async with ScriptedServer(_sum_answer, token_ids=True, logprobs=True) as srv:
        out = await _run(env, srv, num_rollouts=2, folder=tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    assert out["metadata"]["avg_reward"] == 1.0 and out["metadata"]["num_errors"] == 0
    ep = lines[0]
    assert ep["ok"] and ep["complete"] and ep["env"]["id"] == "vf-sums"
    (trace,) = ep["traces"]
    assert trace["rewards"]["correct"] == {"score": 1.0, "weight": 1.0}
    assert trace["metrics"]["turns"] == 1.0
    assert trace["agent"]["config"]["runtime"]["type"] == "subprocess"
    timing = trace["timing"]
    spans = [timing[k] for k in ("boot", "setup", "agent", "finalize", "scoring")]
    assert all(s["end"] >= s["start"] > 0 for s in spans)  # every stage was stamped, in order
    assert [s["start"] for s in spans] == sorted(s["start"] for s in spans)
    assert trace["calls"][0]["time"]["end"] >= trace["calls"][0]["time"]["start"] > 0
    # vLLM token ids and logprobs from the server land on the reply node
    sampled = [n for n in trace["nodes"] if n.get("sampled")]
    assert sampled and sampled[0]["token_ids"] and len(sampled[0]["logprobs"]) > 0
    assert {(x["example_id"], x["rollout_index"]) for x in lines} == {(i, r) for i in range(3) for r in range(2)}


async def test_tool_loop_on_the_null_harness() -> None:
    def script(req):
        if req.messages[-1]["role"] == "tool":
            return reply(req.messages[-1]["content"])
        m = re.search(r"(\d+) \+ (\d+)", req.messages[-1]["content"])
        assert {t["function"]["name"] for t in req.tools} == {"add", "explode"}
        return tool_calls(tool_call("add", {"a": int(m.group(1)), "b": int(m.group(2))}, id="c1"))

    env = load_environment({"taskset": {"id": "vf-sums", "n": 2}, "agent": {"harness": {"id": "null"}}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    states = out.state
    assert [s["reward"] for s in states] == [1.0, 1.0]
    trace = states[0]["_episode"].traces[0]
    roles = [m.role for m in trace.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert trace.metrics["turns"] == 2.0


async def test_a_failing_tool_is_the_models_to_read() -> None:
    def script(req):
        if req.messages[-1]["role"] == "tool":
            return reply("saw: " + req.messages[-1]["content"])
        return tool_calls(tool_call("explode", {}, id="c1"))

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    trace = out.state[0]["_episode"].traces[0]
    assert "boom" in trace.last_reply and trace.ok


async def test_max_turns_stops_a_tool_loop() -> None:
    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}, "agent": {"max_turns": 3}})
    async with ScriptedServer(lambda req: tool_calls(tool_call("add", {"a": 1, "b": 1}, id="c1"))) as srv:
        out = await _run(env, srv)
        assert srv.request_count == 3
    trace = out.state[0]["_episode"].traces[0]
    assert trace.stop_condition == "max_turns" and trace.is_truncated


async def test_a_request_stop_sees_the_proposed_tool_calls_before_they_run() -> None:
    """As the original polices them: the request ``@vf.stop`` hooks see each tool call the model
    proposes (the branch plus that call's still empty result) before the tool runs; one that fires
    ends the rollout with the tool unrun (its side effects never happen)."""
    import verifiers.v1 as vf
    from verifiers.v1.harness import chat_loop, tool_functions
    from verifiers.v1.interception import CallContext
    from verifiers.v1.trace import Trace

    ran: list[str] = []

    class Gated(vf.Task):
        @vf.tool
        def delete_everything(self) -> str:
            """Delete everything."""
            ran.append("delete_everything")
            return "deleted"

        @vf.tool
        def look(self) -> str:
            """Look around."""
            ran.append("look")
            return "a room"

        @vf.stop
        def no_deleting(self, request: vf.Request) -> bool:
            return any(isinstance(m, vf.ToolMessage) and m.name == "delete_everything" for m in request.messages)

    def script(req):
        if req.messages[-1]["role"] == "tool":
            return tool_calls(tool_call("delete_everything", {}, id="c2"))
        return tool_calls(tool_call("look", {}, id="c1"))

    task = Gated(vf.TaskData(prompt="tidy up"))
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            trace = Trace.for_task(task)
            ctx = CallContext.for_task(task, client=client, model="scripted-model", trace=trace)
            tools = tool_functions(task)
            await chat_loop(ctx, [vf.UserMessage(content="tidy up")], tools, tool_timeout=10, available={"trace": trace})
        finally:
            await client.aclose()
        assert srv.request_count == 2
    assert ran == ["look"]  # the first reply's tool ran; the second's was refused before it ran
    assert trace.stop_condition == "no_deleting" and trace.is_completed


async def test_stop_hook_on_the_response() -> None:
    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(lambda req: tool_calls(tool_call("add", {"a": 1, "b": 1}, id="c1"), content="STOP")) as srv:
        out = await _run(env, srv)
        assert srv.request_count == 1
    assert out.state[0]["_episode"].traces[0].stop_condition == "said_stop"


async def test_best_of_n_compares_attempts() -> None:
    answers = iter(["1", "0", "1", "9"])  # the first task's sum is 1: attempts 1 and 3 are right

    env = load_environment({"id": "best-of-n", "n": 4, "taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(lambda req: next(answers)) as srv:
        out = await _run(env, srv)
    (state,) = out.state
    traces = state["_episode"].traces
    assert len(traces) == 4
    assert sorted(t.metrics["best"] for t in traces) == [0.0, 0.0, 1.0, 1.0]
    assert all(t.metrics["pass_at_n"] == 1.0 for t in traces)
    assert state["reward"] == 0.5


async def test_user_sim_relays_between_two_agents() -> None:
    def script(req):
        system = req.messages[0]["content"] if req.messages[0]["role"] == "system" else ""
        if "playing a USER" in system:  # the user's side
            n_user_turns = sum(1 for m in req.messages if m["role"] == "assistant")
            if n_user_turns == 0:
                return "Guess my favourite colour."
            colour = "red" if "red" in system else "blue"
            return "###DONE###" if colour in req.messages[-1]["content"] else f"No. It is {colour}."
        # the assistant never sees the scenario
        assert not any("favourite colour is" in (m["content"] or "") for m in req.messages)
        heard = req.messages[-1]["content"]
        return f"Then it is {heard.split()[-1].rstrip('.')}" if heard.startswith("No.") else "Is it green?"

    env = load_environment({"id": "user-sim", "taskset": {"id": "vf-chat"}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    for state in out.state:
        ep = state["_episode"]
        by = {t.agent.name: t for t in ep.traces}
        assert set(by) == {"user", "assistant"}
        assert by["user"].agent.trainable is False and by["assistant"].agent.trainable
        assert by["assistant"].rewards["named_colour"].score == 1.0
        assert by["assistant"].metrics["user_turns"] == 3.0
        assert state["reward"] == 1.0  # the trainable side's reward
        assert by["user"].last_reply == "###DONE###"


async def test_user_sim_ends_at_the_users_max_turns() -> None:
    env = load_environment({"id": "user-sim", "taskset": {"id": "vf-chat"}, "user": {"max_turns": 2}})
    async with ScriptedServer(lambda req: "hm") as srv:
        out = await _run(env, srv)
    by = {t.agent.name: t for t in out.state[0]["_episode"].traces}
    # as in the original: the assistant answers the user's last turn; the user's next turn is refused
    assert by["user"].num_turns == 2 and by["user"].stop_condition == "max_turns"
    assert by["assistant"].num_turns == 2 and by["assistant"].stop_condition == "user_closed"


def test_unknown_role_key_is_one_clear_error() -> None:
    with pytest.raises(PluginError, match="agnt"):
        load_environment({"taskset": {"id": "vf-sums"}, "agnt": {"max_turns": 2}})


async def test_a_server_failure_is_recorded_on_the_trace(tmp_path) -> None:
    from verifiers.testing.scripted import error

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(error(400, "bad things")) as srv:
        out = await _run(env, srv, folder=tmp_path)
    rec = json.loads((tmp_path / "traces.jsonl").read_text())
    assert out["metadata"]["num_errors"] == 1 and not rec["ok"] and not rec["complete"]
    assert rec["traces"][0]["stop_condition"] == "provider_error"
    assert rec["traces"][0]["rewards"] == {}  # an errored trace is not scored


async def test_a_package_env_beside_its_taskset_runs_its_roles() -> None:
    seen = []

    def script(req):
        seen.append(req.body.get("temperature"))
        return "tiny" if req.messages[-1]["content"].startswith("Shorten") else "a very long poem indeed"

    env = load_environment({"taskset": {"id": "vf-relay"}})
    assert type(env).__name__ == "RelayEnv"
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    (state,) = out.state
    by = {t.agent.name: t for t in state["_episode"].traces}
    assert by["writer"].rewards["short"].score == 0.0 and by["editor"].rewards["short"].score == 1.0
    assert seen == [None, 0.0]  # the editor role's own sampling
    assert state["complete"] and state["reward"] == 0.5
    assert type(env).events == ["start", "setup", "run", "stop"]


async def test_a_rollout_timeout_is_an_incomplete_episode_line(tmp_path, monkeypatch) -> None:
    import tempfile

    boxes = tmp_path / "boxes"
    boxes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(boxes))
    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer("1", delay=30) as srv:
        out = await _run(env, srv, folder=tmp_path, timeout=0.5)
    assert not list(boxes.iterdir())  # the cancelled run's runtime was stopped
    rec = json.loads((tmp_path / "traces.jsonl").read_text())
    assert out["metadata"]["num_errors"] == 1
    assert not rec["ok"] and not rec["complete"] and rec["error"]["source"]
    assert rec["traces"] == [] or rec["traces"][0]["is_timeout"]


async def test_bash_harness_runs_commands_and_edits_in_the_runtime(tmp_path) -> None:
    """The original's tools: ``bash(command)`` answers with the output, ``edit(path, old_str,
    new_str)`` replaces one occurrence (an empty ``old_str`` is refused: it would match everywhere)."""
    seen: dict[str, str] = {}

    def script(req):
        last = req.messages[-1]
        if last["role"] == "user":
            assert {t["function"]["name"] for t in req.tools} >= {"bash", "edit", "add"}
            edit = next(t["function"] for t in req.tools if t["function"]["name"] == "edit")
            assert sorted(edit["parameters"]["properties"]) == ["new_str", "old_str", "path"]
            # every parameter described, as the original's tools are (an Annotated[str, "..."] here)
            bash = next(t["function"] for t in req.tools if t["function"]["name"] == "bash")
            params = [*edit["parameters"]["properties"].values(), *bash["parameters"]["properties"].values()]
            assert all(p["type"] == "string" and p["description"] for p in params)
            return tool_calls(tool_call("bash", {"command": "printf 0 > note.txt"}, id="c0"))
        seen[last["tool_call_id"]] = last["content"]
        if last["tool_call_id"] == "c0":
            return tool_calls(tool_call("edit", {"path": "note.txt", "old_str": "", "new_str": "x"}, id="c1"))
        if last["tool_call_id"] == "c1":
            return tool_calls(tool_call("edit", {"path": "note.txt", "old_str": "0", "new_str": "1"}, id="c2"))
        if last["tool_call_id"] == "c2":
            return tool_calls(tool_call("bash", {"command": "cat note.txt"}, id="c3"))
        return reply(last["content"])

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1},
                            "agent": {"harness": {"id": "bash"}, "runtime": {"type": "subprocess", "workdir": str(tmp_path)}}})  # fmt: skip
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    trace = out.state[0]["_episode"].traces[0]
    assert (tmp_path / "note.txt").read_text() == "1"
    assert seen["c0"] == "" and seen["c1"].startswith("error:") and seen["c2"] == "edited note.txt" and seen["c3"] == "1"
    assert trace.last_reply == "1" and out.state[0]["reward"] == 1.0
    assert trace.agent.config.harness["id"] == "bash"


async def test_many_concurrent_episodes_each_get_exactly_one_line(tmp_path) -> None:
    env = load_environment({"taskset": {"id": "vf-sums", "n": 40}})
    async with ScriptedServer(_sum_answer) as srv:
        out = await _run(env, srv, num_rollouts=3, max_concurrent=16, max_concurrent_requests=8, folder=tmp_path)
        assert srv.max_in_flight <= 8
    lines = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    keys = [(x["example_id"], x["rollout_index"]) for x in lines]
    assert len(keys) == len(set(keys)) == 120
    assert out["metadata"]["avg_reward"] == 1.0
    # every trace answered its own task (no crossed conversations between concurrent agents)
    for x in lines:
        (t,) = x["traces"]
        a, b = t["task"]["data"]["a"], t["task"]["data"]["b"]
        assert t["nodes"][-1]["message"]["content"] == str(a + b)


async def test_a_role_with_its_own_client_talks_to_its_own_server() -> None:
    async with ScriptedServer(lambda req: "###DONE###") as user_srv, ScriptedServer(lambda req: "hello") as main_srv:
        env = load_environment({"id": "user-sim", "taskset": {"id": "vf-chat"}, "user": {"client": {"base_url": user_srv.base_url}}})
        out = await _run(env, main_srv)
        # the user (its own client) opens and ends each conversation; the assistant never speaks
        assert user_srv.request_count == 2 and main_srv.request_count == 0
    for state in out.state:
        by = {t.agent.name: t for t in state["_episode"].traces}
        assert by["user"].last_reply == "###DONE###" and by["assistant"].num_turns == 0


async def test_an_env_whose_run_raises_is_a_failed_episode_the_run_survives(tmp_path) -> None:
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    class Broken(SingleAgentEnv):
        async def run(self, task, agents):
            await agents.agent.run(task)
            if task.data.a == 1:
                raise RuntimeError("env logic broke")

    env = Broken(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 3}))
    async with ScriptedServer(_sum_answer) as srv:
        out = await _run(env, srv, folder=tmp_path)
    lines = {x["example_id"]: x for x in map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())}
    assert out["metadata"]["num_errors"] == 1
    bad = lines[1]
    assert not bad["ok"] and not bad["complete"] and bad["error"]["source"] == "env"
    # recorded as the original's boundary records it: an EnvError naming the hook, then the raised type
    assert bad["errors"][0]["type"] == "EnvError"
    assert bad["errors"][0]["message"] == "Broken.run(): RuntimeError: env logic broke"
    assert len(bad["traces"]) == 1 and bad["traces"][0]["rewards"]["correct"]["score"] == 1.0  # kept, scored
    assert lines[0]["ok"] and lines[2]["ok"]


async def test_a_role_without_a_harness_runs_the_taskset_packages_own() -> None:
    """A package exporting a Harness beside its Taskset: an unpinned role runs that harness (its
    `shout` tool is offered and answers), a pinned one still runs what it names."""

    def script(req):
        names = {t["function"]["name"] for t in req.tools or []}
        if req.messages[-1]["role"] == "tool":
            return reply(req.messages[-1]["content"])
        if "shout" not in names:
            return reply("no shout tool")
        word = re.search(r"Shout (\w+)", req.messages[-1]["content"]).group(1)
        return tool_calls(tool_call("shout", {"text": word}, id="s1"))

    env = load_environment({"taskset": {"id": "vf-own-harness"}})
    assert type(env._harnesses["agent"]).__name__ == "ShoutHarness"
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    assert [s["reward"] for s in out.state] == [1.0, 1.0]
    # the trace records the harness the role played, the taskset's own here, as the original does
    assert out.state[0]["_episode"].traces[0].agent.config.harness["id"] == "vf-own-harness"
    pinned = load_environment({"taskset": {"id": "vf-own-harness"}, "agent": {"harness": {"id": "null"}}})
    assert type(pinned._harnesses["agent"]).__name__ == "NullHarness"
    assert type(load_environment({"taskset": {"id": "vf-sums"}})._harnesses["agent"]).__name__ == "NullHarness"


async def test_a_roles_config_record_is_made_once_per_run_and_again_when_the_config_changes(monkeypatch) -> None:
    from verifiers.v1.agents import AgentConfig, RunContext

    env = load_environment({"taskset": {"id": "vf-sums", "n": 3}, "agent": {"max_turns": 3, "sampling": {"temperature": 0.5}}})
    async with ScriptedServer(_sum_answer) as srv:
        monkeypatch.setenv("VF_TEST_KEY_VAR", "sk-not-recorded")
        base_url = srv.base_url
        client = ModelClient.from_any({"base_url": base_url, "api_key_var": "VF_TEST_KEY_VAR"})
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model",
                               sampling_args={"max_tokens": 16, "extra_headers": {"x-secret": "hidden"}})  # fmt: skip
        finally:
            await client.aclose()
    configs = [st["_episode"].traces[0].agent.config for st in out.state]
    assert len(configs) == 3 and all(c is configs[0] for c in configs)  # one record for the run's role
    assert configs[0].max_turns == 3
    # the role as the run resolved it, as the original records it: the run's model, the merged
    # sampling (never its headers), the run's endpoint by URL and key variable (never the key)
    assert configs[0].model == "scripted-model"
    assert configs[0].sampling == {"max_tokens": 16, "temperature": 0.5}
    assert configs[0].client == {"base_url": base_url.rstrip("/"), "api_key_var": "VF_TEST_KEY_VAR", "type": "eval"}
    line = out.state[0]["_episode"].to_json().decode()  # the episode as traces.jsonl writes it
    assert "sk-not-recorded" not in line and "hidden" not in line
    trace = json.loads(line)["traces"][0]
    assert trace["calls"][0]["endpoint"] == "/chat/completions"  # the provider path, as the original's
    assert trace["agent"]["runtime"]["borrowed"] is False and trace["agent"]["runtime"]["type"] == "subprocess"

    # a field assigned between episodes (an env that sets the role's limit per task) is recorded
    ctx = RunContext(client=None, model="m")
    config = AgentConfig(max_turns=2)
    first = ctx.wire_of(config)
    assert ctx.wire_of(config) is first
    config.max_turns = 5
    again = ctx.wire_of(config)
    assert again is not first and again.max_turns == 5 and first.max_turns == 2
    assert ctx.wire_of(AgentConfig(max_turns=2)).max_turns == 2  # another config object: its own record
    # an env server's requests name their own model and sampling: each is recorded as it was
    other = ctx.wire_of(config, model="other-model", sampling={"temperature": 1.0})
    assert other.model == "other-model" and other.sampling == {"temperature": 1.0}
    assert ctx.wire_of(config, model="other-model", sampling={"temperature": 1.0}) is other
    assert ctx.wire_of(config, model="other-model", sampling={"temperature": 0.0}).sampling == {"temperature": 0.0}
    # a role's own endpoint in the original's client shape (its records' client is a union on type)
    own = AgentConfig(client={"base_url": "http://judge.local/v1", "timeout": 12})
    assert ctx.wire_of(own, model="m").client == {"base_url": "http://judge.local/v1", "headers": {}, "timeout": {"read": 12.0}, "type": "eval"}

    # an env that makes a fresh config for every episode does not grow the run's cache without bound
    from verifiers.v1.agents import MAX_WIRES

    for turns in range(1, 3 * MAX_WIRES):
        assert ctx.wire_of(AgentConfig(max_turns=turns)).max_turns == turns
    assert len(ctx.wires) <= MAX_WIRES


async def test_the_envs_own_deadlines_end_the_episode_and_keep_what_finished(tmp_path, monkeypatch) -> None:
    """``[env.timeout]``: ``episode`` bounds ``setup`` + ``run`` (an agent run still in flight is
    cancelled and its runtime stopped; one that finished is kept and scored), ``finalize`` the env's
    ``finalize``. Either is a ``TimeoutError`` on the episode, which is then a timeout."""
    import asyncio
    import tempfile

    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    boxes = tmp_path / "boxes"
    boxes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(boxes))

    class Slow(SingleAgentEnv):
        async def run(self, task, agents):
            await agents.agent.run(task)  # answered at once for a == 0; the server stalls for a == 1
            if task.data.a == 0:
                await asyncio.sleep(30)

        async def finalize(self, task, episode):
            await asyncio.sleep(30)

    def script(req):
        return reply(_sum_answer(req), delay=30 if "1 + 2" in req.messages[-1]["content"] else 0)

    env = Slow(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 2}, timeout={"episode": 1.0, "finalize": 0.3}))
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv, folder=tmp_path / "run")
    lines = {x["example_id"]: x for x in map(json.loads, (tmp_path / "run" / "traces.jsonl").read_text().splitlines())}
    assert out["metadata"]["num_errors"] == 2
    for ex in (0, 1):
        rec = lines[ex]
        assert not rec["ok"] and not rec["complete"] and rec["is_timeout"]
        (err,) = rec["errors"]
        assert err["type"] == "TimeoutError" and "Slow.run() ran past its 1 s deadline ([env.timeout] episode)" in err["message"]
    (kept,) = lines[0]["traces"]  # finished before the deadline: kept and scored
    assert kept["rewards"]["correct"]["score"] == 1.0
    assert lines[1]["traces"] == []  # its agent run was cancelled
    assert not list(boxes.iterdir())  # and its runtime stopped

    class SlowFinalize(SingleAgentEnv):
        async def finalize(self, task, episode):
            await asyncio.sleep(30)

    fast = SlowFinalize(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}, timeout={"finalize": 0.3}))
    async with ScriptedServer(_sum_answer) as srv:
        out = await _run(fast, srv, folder=tmp_path / "fin")
    (rec,) = map(json.loads, (tmp_path / "fin" / "traces.jsonl").read_text().splitlines())
    (err,) = rec["errors"]
    assert err["type"] == "TimeoutError" and "SlowFinalize.finalize() ran past its 0.3 s deadline ([env.timeout] finalize)" in err["message"]
    assert rec["is_timeout"] and not rec["ok"] and rec["traces"][0]["rewards"]["correct"]["score"] == 1.0


async def test_an_env_whose_run_plays_no_agent_is_a_failed_episode(tmp_path) -> None:
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    class Idle(SingleAgentEnv):
        async def run(self, task, agents):
            return None

    env = Idle(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    async with ScriptedServer(_sum_answer) as srv:
        out = await _run(env, srv, folder=tmp_path)
        assert srv.request_count == 0
    (rec,) = map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())
    assert out["metadata"]["num_errors"] == 1 and not rec["ok"] and rec["traces"] == []
    assert "Idle.run() played no agent" in rec["errors"][0]["message"]


def test_the_originals_interception_shapes_load_and_a_malformed_one_is_refused() -> None:
    from verifiers.v1.interception import StaticInterceptionPoolConfig

    env = load_environment({"taskset": {"id": "vf-sums"}, "interception": {"type": "static", "servers": [
        {"type": "server", "tunnel": {"type": "custom", "url": "http://10.0.0.5:8765", "port": 8765}}]}})  # fmt: skip
    assert isinstance(env.config.interception, StaticInterceptionPoolConfig)
    assert env.config.interception.servers[0].tunnel.port == 8765
    assert load_environment({"taskset": {"id": "vf-sums"}}).config.interception.multiplex == 32
    for bad, why in (({"type": "static", "servers": []}, "servers"), ({"type": "elastic", "multiplex": 0}, "multiplex"),
                     ({"type": "tunnel"}, "interception"), ({"type": "server", "tunnel": {"type": "custom", "url": "x"}}, "port")):  # fmt: skip
        with pytest.raises(PluginError, match=why):
            load_environment({"taskset": {"id": "vf-sums"}, "interception": bad})
    with pytest.raises(PluginError, match="episode"):
        load_environment({"taskset": {"id": "vf-sums"}, "timeout": {"episode": 0}})


OVERFLOW = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."


async def test_a_request_too_long_for_the_context_ends_the_run_cleanly_without_compaction() -> None:
    """As the original's chat loop: a provider refusal for context length is the run's budget spent
    (the trace is scored, the refused call is on its record); any other 400 is the trace's error."""
    from verifiers.testing.scripted import error

    def script(req):
        if req.messages[-1]["role"] == "user":
            return tool_calls(tool_call("add", {"a": 0, "b": 1}, id="c0"))
        return error(400, OVERFLOW)

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
        assert srv.request_count == 2  # the refusal is not retried
    trace = out.state[0]["_episode"].traces[0]
    assert trace.ok and trace.errors == [] and trace.stop_condition == "agent_completed"
    assert [c.error.status_code if c.error else None for c in trace.calls] == [None, 400]
    assert "maximum context length" in trace.calls[1].error.message
    assert "correct" in trace.rewards and out["metadata"]["num_errors"] == 0  # scored


async def test_bash_compaction_hands_the_run_on_to_a_summary_at_its_threshold(tmp_path) -> None:
    """``summarize_at_tokens``: the reply's context plus its tool results reached the threshold, so
    the model is asked for a hand-off note (tools offered, ``tool_choice = "none"``) and the run goes
    on from the system prompt and that note alone."""
    from verifiers.v1.compaction import SUMMARY_FRAME, SUMMARY_REQUEST

    def script(req):
        last = req.messages[-1]
        if last["role"] == "tool":
            assert last["content"] == "hi\n"
            return reply("unused")
        if last["content"] == SUMMARY_REQUEST:
            assert req.body["tool_choice"] == "none" and req.tools
            return reply("ran echo hi; the answer is 1")
        if last["content"].startswith(SUMMARY_FRAME):
            return reply("1")
        return reply(None, tool_calls=[tool_call("bash", {"command": "echo hi"}, id="c0")],
                     usage={"prompt_tokens": 90, "completion_tokens": 20, "total_tokens": 110})  # fmt: skip

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}, "agent": {"harness": {
        "id": "bash", "compaction": {"summarize_at_tokens": 100}}, "runtime": {"type": "subprocess", "workdir": str(tmp_path)}}})  # fmt: skip
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
        bodies = [r.messages for r in srv.requests]
    assert len(bodies) == 3
    system, note = bodies[2]
    assert system["role"] == "system" and system["content"].startswith("You are a coding agent")
    assert note["content"] == f"{SUMMARY_FRAME}\n\nran echo hi; the answer is 1"
    trace = out.state[0]["_episode"].traces[0]
    assert trace.ok and len(trace.calls) == 3 and out.state[0]["reward"] == 1.0


async def test_bash_compaction_from_the_advertised_window_retries_an_overflow_once(tmp_path) -> None:
    """No ``summarize_at_tokens``: the threshold comes from the window ``GET /models`` advertises;
    a request refused for length is compacted and sent again, and a rebuilt one that still does not
    fit fails the rollout (``compaction failed``)."""
    from verifiers.testing.scripted import error
    from verifiers.v1.compaction import SUMMARY_FRAME, SUMMARY_REQUEST

    def script_for(still_too_long: bool):
        def script(req):
            last = req.messages[-1]
            if last["role"] == "tool":
                return error(400, OVERFLOW)
            if last["content"] == SUMMARY_REQUEST:
                return reply("a note")
            if last["content"].startswith(SUMMARY_FRAME):
                return error(400, OVERFLOW) if still_too_long else reply("1")
            return tool_calls(tool_call("bash", {"command": "true"}, id="c0"))

        return script

    spec = {"taskset": {"id": "vf-sums", "n": 1}, "agent": {"harness": {"id": "bash"}, "runtime": {"type": "subprocess", "workdir": str(tmp_path)}}}
    async with ScriptedServer(script_for(False), context_window=32768) as srv:
        out = await _run(load_environment(spec), srv)
        assert srv.request_count == 4
    assert out.state[0]["reward"] == 1.0 and out.state[0]["_episode"].traces[0].ok
    async with ScriptedServer(script_for(True), context_window=32768) as srv:
        out = await _run(load_environment(spec), srv)
    trace = out.state[0]["_episode"].traces[0]
    assert not trace.ok and trace.errors[-1].type == "HarnessError"
    assert "compaction failed: the rebuilt conversation still does not fit" in trace.errors[-1].message
    # with compaction off, the same refusal ends the run cleanly, as for the null harness
    off = {**spec, "agent": {**spec["agent"], "harness": {"id": "bash", "compaction": None}}}
    async with ScriptedServer(script_for(False), context_window=32768) as srv:
        out = await _run(load_environment(off), srv)
        assert srv.request_count == 2
    assert out.state[0]["_episode"].traces[0].ok


def test_the_bash_harness_takes_the_originals_knobs() -> None:
    from verifiers.v1.harnesses.bash import BashHarness, BashHarnessConfig

    plain = BashHarness(BashHarnessConfig(edit=False, compaction=None))
    assert set(plain.extra_tools(None)) == {"bash"} and "edit" not in plain.system_prompt(None)
    assert BashHarness(BashHarnessConfig()).system_prompt("Be brief.").endswith("edit tool, which replaces one exact occurrence of a string.\n\nBe brief.")
    env = load_environment({"taskset": {"id": "vf-sums"}, "agent": {"harness": {"id": "bash", "search": True}}})
    with pytest.raises(PluginError, match=r"serper\.dev web search tool, which this version does not offer"):
        env.check()
    with pytest.raises(PluginError, match="summarize_at_tokens"):
        load_environment({"taskset": {"id": "vf-sums"}, "agent": {"harness": {"id": "bash", "compaction": {"summarize_at_tokens": 0}}}})


async def test_a_run_is_scored_as_it_ends_so_the_env_reads_its_reward(tmp_path) -> None:
    """As in the original, a run's trace comes back from ``Agent.run`` scored (the task's rewards
    and metrics, and the harness's own ``@vf.metric`` methods, in the run's box), so an env can
    act on it: this one plays again until the answer is right. The episode keeps every run."""
    import verifiers.v1 as vf
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig
    from verifiers.v1.harnesses.null import NullHarness

    seen: list[float] = []
    ok_while_scored: list[bool] = []
    ok_after: list[bool] = []

    class UntilRight(SingleAgentEnv):
        async def run(self, task, agents):
            for _ in range(3):
                trace = await agents.agent.run(task)
                seen.append(trace.reward)
                ok_after.append(trace.ok)
                if trace.reward == 1.0:
                    return

    class Counting(NullHarness):
        @vf.metric
        def replies(self, trace: vf.Trace, runtime) -> float:
            assert runtime is not None  # the run's box, still up
            ok_while_scored.append(trace.ok)
            return float(trace.num_turns)

    answers = iter(["no", "still no", "1"])
    env = UntilRight(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    env._harnesses["agent"] = Counting(env._harnesses["agent"].config)
    async with ScriptedServer(lambda req: next(answers)) as srv:
        out = await _run(env, srv, folder=tmp_path)
    assert seen == [0.0, 0.0, 1.0]
    # as in the original, a run is ok only once it has ended: its scoring hooks read it False
    assert ok_while_scored == [False] * 3 and ok_after == [True] * 3
    (rec,) = map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())
    assert [t["rewards"]["correct"]["score"] for t in rec["traces"]] == [0.0, 0.0, 1.0]
    assert all(t["metrics"]["replies"] == 1.0 and t["timing"]["scoring"]["end"] >= t["timing"]["scoring"]["start"] > 0 for t in rec["traces"])
    assert rec["ok"] and out["metadata"]["num_errors"] == 0


async def test_the_roles_scoring_deadline_bounds_the_whole_scoring() -> None:
    import asyncio

    import verifiers.v1 as vf
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig
    from verifiers.v1.harnesses.null import NullHarness

    class Slow(NullHarness):
        @vf.metric
        async def slow(self) -> float:
            await asyncio.sleep(30)
            return 1.0

    env = SingleAgentEnv(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}, agent={"timeout": {"scoring": 0.3}}))
    env._harnesses["agent"] = Slow(env._harnesses["agent"].config)
    async with ScriptedServer(_sum_answer) as srv:
        out = await _run(env, srv)
    episode = out.state[0]["_episode"]
    trace = episode.traces[0]
    assert trace.is_timeout and trace.stop_condition == "scoring_timeout"
    assert not episode.is_timeout  # as in the original: only the env's own deadline flags the episode


async def test_a_roles_time_budget_counts_only_its_own_turns(tmp_path) -> None:
    """user-sim with a user whose rollout budget is shorter than one assistant reply: the user's
    own turns are quick, so neither run times out and both stay in the episode (the budget counts
    the harness's turns, not the time the env holds the run open while another agent works)."""
    def script(req):
        system = req.messages[0]["content"] if req.messages and req.messages[0]["role"] == "system" else ""
        if "USER" in system:
            return reply("what is 0 + 1?" if len(req.messages) < 3 else "###DONE###")
        return reply("1", delay=0.8)

    env = load_environment({"id": "user-sim", "taskset": {"id": "vf-sums", "n": 1},
                            "user": {"max_turns": 3, "timeout": {"rollout": 0.5}}})  # fmt: skip
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    by = {t.agent.name: t for t in out.state[0]["_episode"].traces}
    assert set(by) == {"user", "assistant"} and not any(t.is_timeout for t in by.values())
    assert by["assistant"].ok and by["assistant"].num_turns >= 1


async def test_a_run_whose_scoring_is_cut_off_still_stops_its_box(tmp_path, monkeypatch) -> None:
    """The rollout's timeout fires while a reward runs in the box: the run is cancelled, and its
    box is stopped on that path too."""
    import asyncio
    import tempfile

    import verifiers.v1 as vf
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    boxes = tmp_path / "boxes"
    boxes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(boxes))

    class Slow(vf.Task):
        @vf.reward
        async def tests_pass(self, runtime) -> float:
            await asyncio.sleep(30)
            return 1.0

    class Env(SingleAgentEnv):
        async def run(self, task, agents):
            await agents.agent.run(Slow(task.data))

    env = Env(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    async with ScriptedServer(lambda req: "1") as srv:
        out = await _run(env, srv, timeout=1.0)
    assert out.state[0]["error"]["type"] == "TimeoutError"
    assert not list(boxes.iterdir())


async def test_an_error_in_the_envs_code_between_turns_fails_the_run(tmp_path) -> None:
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    class Broken(SingleAgentEnv):
        async def run(self, task, agents):
            async with agents.agent.interaction(task) as it:
                await it.turn()
                raise RuntimeError("env bug between turns")

    env = Broken(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    async with ScriptedServer(_sum_answer) as srv:
        await _run(env, srv, folder=tmp_path)
    (rec,) = map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())
    assert "env bug between turns" in rec["errors"][0]["message"] and not rec["ok"]
    (trace,) = rec["traces"]
    assert not trace["ok"] and trace["rewards"] == {} and trace["errors"][0]["type"] == "RuntimeError"


async def test_the_tasks_scoring_deadline_is_a_stop_for_the_whole_scoring() -> None:
    import asyncio

    import verifiers.v1 as vf
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    class Slow(vf.Task):
        @vf.reward
        async def slow(self) -> float:
            await asyncio.sleep(30)
            return 1.0

    class Env(SingleAgentEnv):
        async def run(self, task, agents):
            await agents.agent.run(Slow(vf.TaskData(prompt="p", timeout={"scoring": 0.3})))

    env = Env(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    async with ScriptedServer(lambda req: "1") as srv:
        out = await _run(env, srv)
    trace = out.state[0]["_episode"].traces[0]
    assert trace.ok and trace.is_timeout and trace.stop_condition == "scoring_timeout" and trace.errors == []


async def test_a_length_cut_reply_at_max_turns_stays_the_runs_last_reply(tmp_path) -> None:
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    seen = {}

    class Env(SingleAgentEnv):
        async def run(self, task, agents):
            async with agents.agent.interaction(task) as it:
                seen["segment"] = (await it.turn()).last_reply

    def script(req):
        if req.messages[-1]["role"] == "tool":
            return reply("the answer is 1", finish_reason="length", usage={"prompt_tokens": 150, "completion_tokens": 20, "total_tokens": 170})
        return reply(None, tool_calls=[tool_call("bash", {"command": "true"}, id="c0")], usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})

    env = Env(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}, agent={"max_turns": 2, "harness": {
        "id": "bash", "compaction": {"summarize_at_tokens": 100}}, "runtime": {"type": "subprocess", "workdir": str(tmp_path)}}))  # fmt: skip
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
        assert srv.request_count == 2  # the hand-off request was refused as max_turns
    assert seen["segment"] == "the answer is 1" == out.state[0]["_episode"].traces[0].last_reply


async def test_the_advertised_window_is_read_defensively_and_once() -> None:
    """A /models body from a hostile or broken server is no window (never an error); a listing that
    failed is asked again later; callers at once share one listing."""
    import asyncio

    from aiohttp import web

    from tests.support.aiohttp_app import serving
    from verifiers.clients import ModelClient

    bodies = [{"data": None}, {"data": 5}, [1], {"data": [{"id": "m", "max_model_len": -1}]},
              {"data": [{"id": "m", "max_model_len": True}]}, {"data": [{"id": "m", "max_model_len": 10**30}]}]  # fmt: skip
    served = {"n": 0, "status": 500, "body": None}

    async def models(request):
        served["n"] += 1
        await asyncio.sleep(0.05)
        return web.json_response(served["body"], status=served["status"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    async with serving(app) as base:
        for body, want in zip(bodies, [None, None, None, None, None, 10**30], strict=True):
            served.update(status=200, body=body)
            async with ModelClient.from_any({"base_url": f"{base}/v1", "max_retries": 0}) as client:
                assert await client.context_window("m") == want
        async with ModelClient.from_any({"base_url": f"{base}/v1", "max_retries": 0}) as client:
            served.update(status=404, body={"error": "no"})
            assert await client.context_window("m") is None
            served.update(status=200, body={"data": [{"id": "m", "max_model_len": 4096}]}, n=0)
            assert await asyncio.gather(*(client.context_window("m") for _ in range(8))) == [4096] * 8
            assert served["n"] == 1
            assert await client.context_window("m") == 4096 and served["n"] == 1


async def test_a_trainer_drives_episodes_through_serving_slots_and_run_episode() -> None:
    """The original's driving API, as trainers (prime-rl bridges, tinker-cookbook) call it:
    ``vf.ModelContext`` with a client config, ``env.serving()``, ``env.slots`` + ``env.run_slot``
    under an episode semaphore, ``env.run_episode`` (outside ``serving`` too, with the env's
    ``start``/``stop`` around it); the env's hook errors are ``EnvError`` records naming the hook."""
    import asyncio

    import verifiers.v1 as vf
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    calls: list[str] = []

    class Watched(SingleAgentEnv):
        async def start(self):
            calls.append("start")

        async def stop(self):
            calls.append("stop")

        async def setup(self, agents):
            if agents.agent.config.max_turns == 7:
                raise KeyError("no such seat")

        async def finalize(self, task, episode):
            if task.data.a == 1:
                raise ValueError("judged badly")
            episode.traces[0].record_metric("finalized", 1.0)

    env = Watched(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 3}))
    tasks = list(env.taskset)
    async with ScriptedServer(_sum_answer, token_ids=True) as srv:
        ctx = vf.ModelContext(model="scripted-model", client=vf.EvalClientConfig(base_url=srv.base_url),
                              sampling=vf.SamplingConfig(max_tokens=16))
        async with env.serving():
            assert calls == ["start"]
            slots = env.slots(tasks[0], 2)
            minted, done = [], []

            async def complete(ep):
                done.append(ep.id)

            episodes = await asyncio.gather(*(env.run_slot(s, ctx, asyncio.Semaphore(1), on_complete=complete,
                                                            on_trace=minted.append) for s in slots))
            assert [s.done for s in slots] == [True, True] and [s.episode for s in slots] == episodes
            assert len(minted) == 2 and sorted(done) == sorted(e.id for e in episodes)
            for ep in episodes:
                assert ep.ok and ep.traces[0].reward == 1.0 and ep.traces[0].metrics["finalized"] == 1.0
                assert ep.traces[0].nodes[-1].token_ids  # the server's token ids reach the trace
            failed = await env.run_episode(tasks[1], ctx)  # its finalize raises
            assert not failed.ok and failed.traces[0].reward == 1.0
            assert [(e.type, e.message) for e in failed.errors] == [("EnvError", "Watched.finalize(): ValueError: judged badly")]
            async with env.serving():  # a nested block joins the one open: no second start
                assert calls == ["start"]
        assert calls == ["start", "stop"]
        assert srv.request_count == 3
        # outside serving(): episodes that overlap share one serving, started once, closed by the last
        ctx2 = vf.ModelContext(model="scripted-model", client={"base_url": srv.base_url})
        both = await asyncio.gather(env.run_episode(tasks[0], ctx2), env.run_episode(tasks[0], ctx2))
        assert [e.ok for e in both] == [True, True] and calls == ["start", "stop", "start", "stop"]
        assert env._serving is None
        env.config.agent.max_turns = 7
        alone = await env.run_episode(tasks[2], ctx2)
    assert calls == ["start", "stop", "start", "stop", "start", "stop"]
    assert not alone.ok and alone.traces == []
    assert [(e.type, e.message) for e in alone.errors] == [("EnvError", "Watched.setup(): KeyError: 'no such seat'")]
    # a trainer's client (type 'train', what prime-rl sends): the same endpoint, token ids and logprobs asked for
    trainer = Watched(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 3}))
    async with ScriptedServer(_sum_answer, token_ids=True, logprobs=True) as srv:
        ctx_train = vf.ModelContext(model="scripted-model", client={"type": "train", "base_url": srv.base_url})
        trained = await trainer.run_episode(tasks[0], ctx_train)
        body = srv.requests[-1].body
    assert trained.ok and body["logprobs"] is True and body["return_token_ids"] is True
    assert trained.traces[0].nodes[-1].token_ids and trained.traces[0].nodes[-1].logprobs
    with pytest.raises(TypeError, match=r"ModelContext\.client"):
        vf.ModelContext(model="m", client=42)
    # a refusal before anything started stops nothing; an error's status code stays on the record
    calls.clear()
    env.check = lambda: (_ for _ in ()).throw(PluginError("cannot start here"))
    with pytest.raises(PluginError, match="cannot start here"):
        async with env.serving():
            pass
    assert calls == [] and env._serving is None
    del env.check

    class Busy(Watched):
        async def setup(self, agents):
            from verifiers.v1.errors import ProviderError

            raise ProviderError("judge endpoint busy", status_code=503)

    busy = Busy(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    (err,) = (await busy.run_episode(tasks[0], vf.ModelContext(model="m", client={"base_url": "http://127.0.0.1:9/v1"}))).errors
    assert (err.type, err.message, err.status_code) == ("ProviderError", "judge endpoint busy", 503)

    # run_slot retries the whole episode by [env.retries] (a status rule), the earlier tries' errors first
    class Flaky(Watched):
        tries = 0

        async def setup(self, agents):
            from verifiers.v1.errors import ProviderError

            Flaky.tries += 1
            if Flaky.tries < 3:
                raise ProviderError(f"busy {Flaky.tries}", status_code=503)

    flaky = Flaky(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1},
                                      retries={"rules": [{"status_code": ["5xx"], "max_retries": 2}]}))  # fmt: skip
    async with ScriptedServer(_sum_answer) as srv:
        ctx = vf.ModelContext(model="scripted-model", client={"base_url": srv.base_url})
        async with flaky.serving():
            (slot,) = flaky.slots(tasks[0])
            final = await flaky.run_slot(slot, ctx)
    assert Flaky.tries == 3 and final.ok and slot.episode is final and slot.traces == final.traces
    assert [e.message for e in final.errors] == ["busy 1", "busy 2"] and final.traces[0].reward == 1.0


async def _run_with_no_model_call(env, task):
    """``env`` run on ``task`` against a scripted model that must not be asked."""
    async with ScriptedServer(_sum_answer) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, [task], client, model="scripted-model")
        finally:
            await client.aclose()
        assert srv.request_count == 0
    return out


async def test_a_tasks_network_policy_the_runtime_cannot_keep_fails_the_episode_before_any_call(tmp_path) -> None:
    """As the original: a task that restricts the network (``network_allow`` other than ``*``, or a
    ``network_block``) on the subprocess runtime (the host's network) is refused, the episode an
    ``EnvError`` with no trace and no model call; the sandbox runtime (no network) keeps a policy
    that names no host to reach and refuses one that does."""
    from verifiers.v1.runtimes import SandboxConfig, SubprocessConfig, placement_refusal
    from verifiers.v1.task import TaskData

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    (task,) = list(env.taskset)
    closed = type(task)(task.data.model_copy(update={"network_allow": [], "idx": 0}))
    async with ScriptedServer(_sum_answer) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, [closed], client, model="scripted-model", folder=tmp_path)
        finally:
            await client.aclose()
        assert srv.request_count == 0
    (rec,) = map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())
    assert out["metadata"]["num_errors"] == 1 and not rec["ok"] and rec["traces"] == []
    assert rec["errors"][0]["type"] == "EnvError"
    assert rec["errors"][0]["message"] == ("SingleAgentEnv.run(): ValueError: task 0 requires a network policy, but the "
                                           "subprocess runtime does not support framework-aware policies")
    # a task that names a Docker image, on the host: refused the same way, nothing run on the host
    imaged = type(task)(task.data.model_copy(update={"image": "python:3.12-slim", "idx": 1}))
    out = await _run_with_no_model_call(env, imaged)
    (err,) = out.state[0]["_episode"].errors
    assert out.state[0]["_episode"].traces == []
    assert err.type == "EnvError" and err.message.startswith(
        "SingleAgentEnv.run(): ValueError: task 1 requires image 'python:3.12-slim', but the subprocess runtime has no container")
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    class Borrowing(SingleAgentEnv):  # a borrowed box is held to the task's policy as well
        async def run(self, task, agents):
            async with agents.agent.provision(task) as box:
                await agents.agent.run(task, runtime=box)

    lender = Borrowing(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    out = await _run_with_no_model_call(lender, closed)
    (err,) = out.state[0]["_episode"].errors
    assert err.type == "EnvError" and err.message.startswith("Borrowing.run(): ValueError: task 0 requires a network policy")
    sub, box = SubprocessConfig(), SandboxConfig()
    assert placement_refusal(sub, TaskData(prompt="x")) is None  # the default: any host
    assert placement_refusal(sub, TaskData(prompt="x", network_block=["evil.example"])) is not None
    assert placement_refusal(box, TaskData(prompt="x", network_allow=[])) is None
    assert placement_refusal(box, TaskData(prompt="x", network_block=["evil.example"])) is None
    assert "pypi.org" in placement_refusal(box, TaskData(prompt="x", network_allow=["pypi.org"]))
    # a Docker image: the host has no container, so the subprocess runtime refuses it first, in one
    # line (the sandbox runtime refuses it when made: SandboxRuntime.refuse_task)
    imaged = TaskData(prompt="x", image="python:3.12-slim", network_allow=[])
    why = placement_refusal(sub, imaged)
    assert why is not None and "python:3.12-slim" in why and "subprocess" in why and "\n" not in why
    assert placement_refusal(box, TaskData(prompt="x", image="python:3.12-slim")) is None


async def test_an_empty_reply_is_recorded_without_content(tmp_path) -> None:
    """As the original reads a chat reply: an empty one has no content (not ``""``), and a reply in
    text parts is their text."""
    env = load_environment({"taskset": {"id": "vf-sums", "n": 2}})

    from types import SimpleNamespace

    from verifiers.v1.interception import response_from_model

    def script(req):
        return reply("") if "0 + 1" in req.messages[-1]["content"] else reply("3")

    async with ScriptedServer(script) as srv:
        await _run(env, srv, folder=tmp_path)
    lines = {x["example_id"]: x for x in map(json.loads, (tmp_path / "traces.jsonl").read_text().splitlines())}
    empty = lines[0]["traces"][0]["nodes"][-1]["message"]
    assert empty["role"] == "assistant" and "content" not in empty
    assert lines[0]["traces"][0]["rewards"]["correct"]["score"] == 0.0
    assert lines[1]["traces"][0]["rewards"]["correct"]["score"] == 1.0
    parts = SimpleNamespace(message={"role": "assistant", "content": [{"type": "text", "text": "3"}, {"type": "text", "text": "!"}]},
                            prompt_token_ids=None, completion_token_ids=None, finish_reason="stop", raw={}, usage=None)  # fmt: skip
    assert response_from_model(parts, "m").message.content == "3!"
    # sent back to a model, the empty reply is "" (strict providers refuse null content without tool calls)
    from verifiers.v1.messages import messages_to_openai
    from verifiers.v1.types import AssistantMessage

    assert messages_to_openai([AssistantMessage(content=None)]) == [{"role": "assistant", "content": ""}]
    from verifiers.v1.interception import messages_from_openai

    assert messages_from_openai([{"role": "assistant", "content": ""}]) == [AssistantMessage(content=None)]  # read back as recorded


async def test_max_concurrent_bounds_episodes_not_tasks(tmp_path) -> None:
    """As the original's ``-c``: a task's rollouts are independent episodes, so ``max_concurrent=1``
    plays them one after another (an env whose rollouts share state across episodes relies on it),
    and ``max_concurrent=3`` lets all three play at once. Episodes in flight are counted by the env."""
    from verifiers.v1.envs.single_agent import SingleAgentEnv, SingleAgentEnvConfig

    live, peak = [0], [0]

    class Counting(SingleAgentEnv):
        async def run(self, task, agents):
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            try:
                await super().run(task, agents)
            finally:
                live[0] -= 1

    env = Counting(SingleAgentEnvConfig(taskset={"id": "vf-sums", "n": 1}))
    async with ScriptedServer(lambda req: reply(_sum_answer(req), delay=0.5)) as srv:
        out = await _run(env, srv, num_rollouts=3, max_concurrent=1, folder=tmp_path)
        assert out["metadata"]["avg_reward"] == 1.0 and peak[0] == 1
        lines = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
        assert [(x["example_id"], x["rollout_index"]) for x in lines] == [(0, 0), (0, 1), (0, 2)]
        peak[0] = 0
        await _run(env, srv, num_rollouts=3, max_concurrent=3)
    assert peak[0] == 3


class _Boom(BaseException):
    """A class of the environment's own that derives from BaseException, not Exception."""


async def test_a_hook_or_tool_raising_a_base_exception_fails_its_rollout_not_the_run(tmp_path) -> None:
    """SystemExit, GeneratorExit or a BaseException subclass raised by a hook, a task's setup or a
    tool is that rollout's recorded error (the hook named, the trace kept): the run goes on, every
    other rollout is saved, the summary counts the failures. (A KeyboardInterrupt is not: it may be
    a real Ctrl-C.)"""
    import verifiers.v1 as vf

    class Hostile(vf.Task):
        async def setup(self, runtime) -> None:
            if self.data.prompt == "setupexit":
                raise SystemExit(4)

        @vf.tool
        def explode(self) -> str:
            """Explode."""
            raise _Boom("a tool's own BaseException")

        @vf.stop
        def halt(self) -> bool:  # sync, in the lane's thread: a GeneratorExit from there must reach the hook's caller
            if self.data.prompt == "stopexit":
                raise GeneratorExit("from a stop")
            return False

        @vf.metric
        def first(self) -> float:
            if self.data.prompt == "sysexit":
                raise SystemExit(3)
            return 1.0

        @vf.metric
        async def second(self) -> float:  # two metrics: the stage gathers them
            return 1.0

        @vf.reward
        async def correct(self, trace) -> float:
            if self.data.prompt == "genexit":
                raise GeneratorExit("from a reward")
            return 1.0

    def script(req):
        if req.messages[-1]["role"] == "tool":
            return reply(req.messages[-1]["content"])
        if req.messages[-1]["content"] == "boom":
            return tool_calls(tool_call("explode", {}, id="c1"))
        return reply("ok")

    modes = ["fine", "genexit", "sysexit", "setupexit", "boom", "stopexit"]
    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}})
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, [Hostile(vf.TaskData(prompt=m)) for m in modes], client, model="scripted-model", folder=tmp_path)
        finally:
            await client.aclose()
    lines = {json.loads(x)["traces"][0]["task"]["data"]["prompt"]: json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()}
    assert set(lines) == set(modes)  # every rollout saved, each with its trace
    errors = {m: [e["message"] for e in lines[m]["traces"][0]["errors"]] for m in modes}
    assert errors["fine"] == [] and lines["fine"]["reward"] == 1.0
    assert errors["genexit"] == ["task Hostile scoring: reward 'correct': raised GeneratorExit: from a reward"]
    assert errors["sysexit"] == ["task Hostile scoring: metric 'first': raised SystemExit: 3"]
    assert errors["setupexit"] == ["task setup: SystemExit: 4"]
    assert errors["stopexit"] == ["stop 'halt': raised GeneratorExit: from a stop"]
    # a tool's failure is the model's to read, as any tool error; the rollout goes on and is scored
    tool_reply = next(n["message"]["content"] for n in lines["boom"]["traces"][0]["nodes"] if n["message"]["role"] == "tool")
    assert tool_reply == "error: _Boom: a tool's own BaseException" and lines["boom"]["reward"] == 1.0
    assert out["metadata"]["num_errors"] == 4

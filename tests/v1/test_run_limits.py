"""A role's token limits (``max_input_tokens``, ``max_output_tokens``, ``max_total_tokens``) and
whole-run retries (``[env.<role>.retries]``, ``[env.retries]``), against a real loopback model
server (ScriptedServer)."""

from __future__ import annotations

import pytest

import verifiers.v1 as vf
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, error, reply, tool_call, tool_calls
from verifiers.v1.agents import RunContext, make_agent
from verifiers.v1.configs.retries import RetryConfig
from verifiers.v1.utils.retries import RetryState


class Looping(vf.Task):
    @vf.tool
    def noop(self) -> str:
        """Do nothing."""
        return "done nothing"


def _first_fails(message: str, then: str):
    """A server whose first request fails (a 400 the client does not retry itself), then answers."""
    seen = []

    def script(req):
        seen.append(req)
        return error(400, message) if len(seen) == 1 else reply(then)

    return script


async def _run(script, config: vf.AgentConfig, task: vf.Task | None = None):
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            agent = make_agent(config, run_ctx=RunContext(client=client, model="scripted-model"))
            trace = await agent.run(task or Looping(vf.TaskData(prompt="loop")))
        finally:
            await client.aclose()
        return trace, srv.request_count


@pytest.mark.parametrize("limit", ["max_input_tokens", "max_output_tokens", "max_total_tokens"])
async def test_a_token_limit_refuses_the_call_after_the_turn_that_reached_it(limit: str) -> None:
    # a model that never stops calling its tool: only the limit ends the run
    loop = lambda req: tool_calls(tool_call("noop", {}, id=f"c{req.turn}"))  # noqa: E731
    count = f"num_{limit.removeprefix('max_')}"
    two, _ = await _run(loop, vf.AgentConfig(max_turns=2))
    three, _ = await _run(loop, vf.AgentConfig(max_turns=3))
    capped_at = getattr(three, count)  # what the run has counted after its third turn
    assert 0 < getattr(two, count) < capped_at
    # a cap that the third turn reaches: that turn completes, the fourth call is refused
    trace, requests = await _run(loop, vf.AgentConfig(max_turns=6, **{limit: capped_at}))
    assert trace.stop_condition == limit and len(trace.calls) == 3 and requests == 3
    assert trace.is_truncated and trace.ok
    assert trace.agent.config.model_dump()[limit] == capped_at  # the record says what capped it


async def test_an_agent_run_is_retried_whole_on_a_matching_error_and_keeps_the_first_tries_errors(monkeypatch) -> None:
    from verifiers.v1 import agents

    monkeypatch.setattr(agents, "backoff", lambda attempt: 0.0)
    flaky = lambda: _first_fails("the grader was busy", "fine")  # noqa: E731
    rule = {"rules": [{"type": "ProviderError", "status_code": ["4xx"], "message": "busy", "max_retries": 1}]}
    trace, requests = await _run(flaky(), vf.AgentConfig(retries=rule))
    assert requests == 2 and trace.ok and trace.last_reply == "fine" and len(trace.calls) == 1
    assert [e.type for e in trace.errors] == ["ProviderError"] and "busy" in trace.errors[0].message
    recorded = trace.agent.config.retries
    assert recorded["max_retries"] == 0 and recorded["rules"][0]["message"] == "busy" and recorded["rules"][0]["max_retries"] == 1

    # no retries configured, or a rule that makes the error final (0), or one that does not match:
    # one try, the error stands
    for retries in ({}, {"max_retries": 3, "rules": [{"type": "ProviderError", "max_retries": 0}]},
                    {"rules": [{"message": "^nothing like it$", "max_retries": 2}]}):  # fmt: skip
        trace, requests = await _run(flaky(), vf.AgentConfig(retries=retries))
        assert requests == 1 and not trace.ok and trace.stop_condition == "provider_error", retries


def test_retry_rules_match_in_order_and_spend_their_own_budgets() -> None:
    error_ = lambda t, status=None, message="": vf.Error(type=t, message=message, status_code=status)  # noqa: E731
    state = RetryState(RetryConfig.model_validate(
        {"max_retries": 1, "rules": [{"status_code": [429, "5xx"], "max_retries": 2}, {"type": "SandboxError", "max_retries": 0}]}))
    assert state.max_retries == 3
    assert state.next_error([error_("ProviderError", 503)]) is not None
    assert state.next_error([error_("ProviderError", 429)]) is not None
    assert state.next_error([error_("ProviderError", 500)]) is None  # its rule is spent: it decides, no fall-through
    assert state.next_error([error_("SandboxError")]) is None  # 0: final
    # the first error no rule refuses gets the default budget
    assert state.next_error([error_("SandboxError"), error_("TaskError")]).type == "TaskError"
    assert state.next_error([error_("TaskError")]) is None
    with pytest.raises(ValueError, match="not a valid regular expression"):
        RetryConfig.model_validate({"rules": [{"message": "(", "max_retries": 1}]})
    with pytest.raises(ValueError):
        RetryConfig.model_validate({"rules": [{"status_code": [99], "max_retries": 1}]})


async def test_an_episode_is_retried_whole_by_env_retries(monkeypatch) -> None:
    from verifiers.v1.env import load_environment
    from verifiers.v1.rollout import run_v1

    monkeypatch.setattr("verifiers.v1.utils.retries.backoff", lambda attempt: 0.0)
    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}, "retries": {"rules": [{"type": "ProviderError", "max_retries": 1}]}})
    assert env.config.retries.rules[0].max_retries == 1
    async with ScriptedServer(_first_fails("flaky", "1")) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
        assert srv.request_count == 2
    episode = out.state[0]["_episode"]
    assert episode.ok and [e.type for e in episode.errors] == ["ProviderError"] and len(episode.traces) == 1
    assert episode.traces[0].rewards["correct"].score == 1.0  # the retried try is the one scored


async def test_a_cancelled_run_with_retries_stops_its_box(monkeypatch) -> None:
    """A run cancelled mid-way (the episode's timeout) stops its own box, with or without retries
    (a try is held until the run decides), and hands no trace on."""
    import asyncio

    from verifiers.v1 import agents

    started, stopped = [], []
    real_make = agents.make_runtime

    def tracking(config):
        runtime = real_make(config)
        real_start, real_stop = runtime.start, runtime.stop

        async def start():
            started.append(runtime)
            return await real_start()

        async def stop():
            stopped.append(runtime)
            return await real_stop()

        runtime.start, runtime.stop = start, stop
        return runtime

    monkeypatch.setattr(agents, "make_runtime", tracking)

    class Slow(vf.Task):
        @vf.tool
        async def wait(self) -> str:
            """Wait."""
            await asyncio.sleep(30)
            return "done"

    for retries in ({}, {"max_retries": 2}):
        started.clear()
        stopped.clear()
        handed: list = []
        async with ScriptedServer(lambda req: tool_calls(tool_call("wait", {}, id="c1"))) as srv:
            client = ModelClient.from_any(srv.base_url)
            try:
                run_ctx = RunContext(client=client, model="scripted-model")
                run_ctx.on_trace = handed.append  # as an episode sets it
                agent = make_agent(vf.AgentConfig(retries=retries), run_ctx=run_ctx)
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(agent.run(Slow(vf.TaskData(prompt="p"))), 1.5)
            finally:
                await client.aclose()
        assert len(started) == 1 and stopped == started and handed == [], retries


async def test_a_tasks_setup_and_finalize_get_the_arguments_they_name() -> None:
    """As the original calls them: by parameter name, in any order, only those named."""
    seen: list[tuple[str, str]] = []

    class Named(vf.Task):
        async def setup(self, runtime) -> None:  # the runtime only
            await runtime.write("note.txt", b"from setup")
            seen.append(("setup", type(runtime).__name__))

        async def finalize(self, runtime, trace) -> None:  # reversed order
            trace.info["note"] = (await runtime.read("note.txt")).decode()
            seen.append(("finalize", f"{type(runtime).__name__}/{type(trace).__name__}"))

    trace, _ = await _run(lambda req: reply("ok"), vf.AgentConfig(), Named(vf.TaskData(prompt="p")))
    assert trace.errors == [] and trace.ok, trace.errors
    assert seen == [("setup", "SubprocessRuntime"), ("finalize", "SubprocessRuntime/Trace")]
    assert trace.info["note"] == "from setup"


async def test_an_empty_task_prompt_sends_the_system_prompt_alone() -> None:
    bodies: list[dict] = []

    def script(req):
        bodies.append(req.body)
        return reply("ok")

    trace, _ = await _run(script, vf.AgentConfig(), vf.Task(vf.TaskData(prompt="", system_prompt="You add numbers.")))
    assert [m["role"] for m in bodies[0]["messages"]] == ["system"] and trace.ok

"""Shapes of real environments written for the original 0.3/0.4 releases (kept from runs of such
environments on both libraries): each test runs an environment of ours with the same shape."""

from __future__ import annotations

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1


async def _run(env, srv, **kw):
    client = ModelClient.from_any(srv.base_url)
    try:
        return await run_v1(env, list(env.taskset), client, model="scripted-model", **kw)
    finally:
        await client.aclose()


def _programs(req):
    if "GREETING" in req.messages[-1]["content"]:
        return "```python\nimport os\nprint(os.environ['GREETING'])\n```"
    return "```python\nprint(6 * 7)\n```"


async def _program_traces():
    env = load_environment({"taskset": {"id": "vf-program"}})
    async with ScriptedServer(_programs) as srv:
        out = await _run(env, srv)
    return [s["_episode"].traces[0] for s in out.state]


async def test_a_metric_runs_the_program_with_the_originals_runtime_calls() -> None:
    traces = await _program_traces()
    assert [t.errors for t in traces] == [[], []]
    assert [t.metrics["passed"] for t in traces] == [1.0, 1.0]
    assert [t.metrics["read_bytes"] for t in traces] == [1.0, 1.0]
    assert sorted(t.metrics["size"] for t in traces) == [13.0, 40.0]


async def test_rewards_run_after_the_metrics_and_read_them_off_the_trace() -> None:
    # as in the original: all metrics (concurrently), then all rewards (concurrently)
    traces = await _program_traces()
    assert [t.rewards["correct"].score for t in traces] == [1.0, 1.0]


async def test_stop_conditions_name_how_the_run_ended() -> None:
    # the original's names: an interaction the env left is `user_closed`; a plain run is `agent_completed`
    env = load_environment({"taskset": {"id": "vf-seats"}})
    async with ScriptedServer("7") as srv:
        out = await _run(env, srv)
    (state,) = out.state
    traces = state["_episode"].traces
    assert sorted(t.agent.name for t in traces) == ["first", "second"]
    assert [t.stop_condition for t in traces] == ["user_closed", "user_closed"]
    assert [t.rewards["spoke"].score for t in traces] == [4.0, 4.0]
    env = load_environment({"taskset": {"id": "vf-program"}})
    async with ScriptedServer(_programs) as srv:
        out = await _run(env, srv)
    assert [s["_episode"].traces[0].stop_condition for s in out.state] == ["agent_completed"] * 2


async def test_an_image_a_tool_returns_reaches_the_tool_message_and_the_model() -> None:
    import pytest

    pytest.importorskip("mcp")
    from verifiers.testing.scripted import reply, tool_call, tool_calls

    seen = []

    def script(req):
        if req.messages[-1]["role"] == "tool":
            seen.append(req.messages[-1]["content"])
            return reply("done")
        return tool_calls(tool_call("camera_shoot", {}, id="c1"))

    env = load_environment({"taskset": {"id": "vf-camera"}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    (trace,) = out.state[0]["_episode"].traces
    assert trace.errors == [] and trace.rewards["saw_image"].score == 1.0
    (tool_message,) = trace.tool_messages
    assert [p.type for p in tool_message.content] == ["text", "image_url"]
    assert tool_message.content[0].text == "a picture"
    (sent,) = seen  # the model got the same parts
    assert [p["type"] for p in sent] == ["text", "image_url"]
    assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,")


async def test_image_turns_built_with_the_originals_image_helper() -> None:
    import base64
    import io

    import pytest

    image = pytest.importorskip("PIL.Image")

    def script(req):
        # decode every square the conversation holds, the way a vision model reads them
        letters = []
        for m in req.messages:
            for part in m["content"] if isinstance(m["content"], list) else []:
                if part["type"] == "image_url":
                    raw = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                    rgb = image.open(io.BytesIO(raw)).convert("RGB").getpixel((0, 0))
                    letters.append({(255, 0, 0): "A", (0, 255, 0): "B", (0, 0, 255): "C"}[rgb])
        return "".join(letters)

    env = load_environment({"taskset": {"id": "vf-squares"}})
    # the package's own Env class (found by the loader) is labelled by its taskset's id, as its
    # episodes are, never as the built-in single-agent env
    assert type(env).__name__ == "SquaresEnv" and env.env_id == "vf-squares"
    assert load_environment({"taskset": {"id": "vf-sums"}}).env_id == "single-agent"
    tasks = list(env.taskset.take(2))
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, tasks, client, model="scripted-model")
        finally:
            await client.aclose()
    traces = [s["_episode"].traces[0] for s in out.state]
    assert [t.errors for t in traces] == [[], []]
    assert [t.rewards["exact"].score for t in traces] == [1.0, 1.0]
    assert [len(t.assistant_messages) for t in traces] == [3, 3]


def test_loading_by_id_where_the_original_keeps_it() -> None:
    import verifiers.v1 as vf
    from verifiers.v1.utils import loaders

    # the original's order: environment_class(taskset_id, env_id="")
    assert vf.environment_class("vf-seats").__name__ == "SeatsEnv"
    assert vf.environment_class("vf-seats", "single-agent").__name__ != "SeatsEnv"
    assert vf.env_config_type("vf-seats").__name__ == "SeatsEnvConfig"
    assert vf.environment_class("vf-program").__name__ == "SingleAgentEnv"  # a taskset alone
    assert loaders.environment_class is vf.environment_class
    assert loaders.taskset_class("vf-seats").__name__ == "SeatsTaskset"
    assert loaders.taskset_config_type("vf-program") is vf.TasksetConfig
    assert loaders.harness_class("null") is type(loaders.load_harness("null"))
    assert loaders.load_taskset({"id": "vf-program"}).config.id == "vf-program"


async def test_an_episode_names_its_env_as_the_original_does() -> None:
    # the taskset id; an env id given with it prefixes it
    async with ScriptedServer("7") as srv:
        out = await _run(load_environment({"taskset": {"id": "vf-seats"}}), srv)
        assert out.state[0]["_episode"].env.id == "vf-seats"
        out = await _run(load_environment({"id": "best-of-n", "taskset": {"id": "vf-program"}}), srv)
        assert {s["_episode"].env.id for s in out.state} == {"best-of-n+vf-program"}


def test_verify_boxed_math_answer_scores_math_equality_of_the_last_box() -> None:
    import verifiers.v1 as vf

    assert vf.verify_boxed_math_answer("so \\boxed{120.0}", "120") == 1.0
    assert vf.verify_boxed_math_answer("first \\boxed{3}, then \\boxed{\\frac{1}{2}}", "\\boxed{0.5}") == 1.0
    assert vf.verify_boxed_math_answer("\\boxed{98}", "99") == 0.0
    assert vf.verify_boxed_math_answer("99", "99") == 0.0  # no box
    assert vf.verify_boxed_math_answer("<think>\\boxed{99}", "99") == 0.0  # reasoning never closed
    assert vf.verify_boxed_math_answer("<think>\\boxed{1}</think> \\boxed{99}", "99") == 1.0
    assert vf.verify_boxed_math_answer(None, "99") == 0.0
    assert vf.verify_boxed_math_answer("\\boxed{\\frac{", "1") == 0.0  # unbalanced: no box


def test_a_v1_taskset_module_without_all_is_told_to_export_it(tmp_path, monkeypatch) -> None:
    import pytest

    from verifiers.utils.env_loading import EnvironmentNotFoundError

    (tmp_path / "vf_unlisted.py").write_text(
        "import verifiers.v1 as vf\n\n\nclass Unlisted(vf.Taskset):\n    def load(self):\n        return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import verifiers as vf_classic

    # through the loader every id goes through first (``vf eval <id>``), which tells the API
    # generations apart: a v1 module that forgot __all__ is told so, not asked for load_environment()
    with pytest.raises(EnvironmentNotFoundError, match=r"defines the v1 taskset Unlisted but does not export it.*__all__ = \['Unlisted'\]"):
        vf_classic.load_environment("vf-unlisted")


async def test_a_trace_stop_reads_the_tools_state_and_the_last_turns_tools_still_run() -> None:
    # as in the original: before each model call, max_turns, then the trace's @vf.stop hooks (which
    # see what the previous turn's tools left on trace.state); a turn at max_turns has its tools run
    import pytest

    pytest.importorskip("mcp")
    from verifiers.testing.scripted import tool_call, tool_calls

    def script(req):
        n = sum(1 for m in req.messages if m["role"] == "tool")
        return tool_calls(tool_call("tally_bump", {}, id=f"b{n}"))  # never stops by itself

    env = load_environment({"taskset": {"id": "vf-tally"}, "agent": {"max_turns": 3, "harness": {"id": "null"}}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    traces = {s["_episode"].traces[0].task.data.idx: s["_episode"].traces[0] for s in out.state}
    stopped, limited = traces[0], traces[1]
    assert stopped.stop_condition == "until" and stopped.metrics["tally"] == 2.0
    assert stopped.num_turns == 2  # the call after the 2nd bump was refused
    assert limited.stop_condition == "max_turns" and limited.num_turns == 3
    assert limited.metrics["tally"] == 3.0  # the 3rd turn's bump ran
    assert [t.errors for t in (stopped, limited)] == [[], []]


def test_the_originals_harness_keys_load_and_skills_on_a_harness_without_them_are_refused(tmp_path) -> None:
    import pytest

    from verifiers.v1.plugins import PluginError

    env = load_environment({"taskset": {"id": "vf-tally"}, "agent": {"harness": {"id": "null", "mcp_header_env": {"docs": {"X-Key": "DOCS_KEY"}}}}})
    env.check()
    assert env.config.agent.harness.mcp_header_env == {"docs": {"X-Key": "DOCS_KEY"}}
    skills = [str(tmp_path), {"runtime": "/opt/skills"}]
    env = load_environment({"taskset": {"id": "vf-tally"}, "agent": {"harness": {"id": "null", "skills": skills}}})
    with pytest.raises(PluginError, match=r"^\[env\.agent\.harness\]: harness 'null' does not install skills"):
        env.check()


def test_a_table_for_a_role_is_laid_over_the_roles_default_config() -> None:
    # as the original's configs: [env.user.runtime] keeps the user-sim user's own max_turns and harness
    env = load_environment({"id": "user-sim", "taskset": {"id": "vf-chat"}, "user": {"runtime": {"type": "subprocess"}}})
    user = env.config.user
    assert (user.max_turns, user.harness.id, user.runtime.type) == (8, "null", "subprocess")
    env = load_environment({"id": "user-sim", "taskset": {"id": "vf-chat"}, "user": {"max_turns": 3}})
    assert (env.config.user.max_turns, env.config.user.harness.id) == (3, "null")


def test_a_table_naming_another_plugin_replaces_the_defaults_knobs() -> None:
    import verifiers.v1 as vf

    class Seats(vf.EnvConfig):
        boxed: vf.AgentConfig = vf.AgentConfig(runtime={"type": "sandbox", "timeout": 60}, max_turns=2)

    seats = Seats.model_validate({"boxed": {"runtime": {"type": "subprocess"}}})
    assert (seats.boxed.runtime.type, seats.boxed.max_turns) == ("subprocess", 2)
    seats = Seats.model_validate({"boxed": {"runtime": {"env": {"A": "1"}}}})
    assert (seats.boxed.runtime.type, seats.boxed.runtime.timeout, seats.boxed.runtime.env) == ("sandbox", 60, {"A": "1"})

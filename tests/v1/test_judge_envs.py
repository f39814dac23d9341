"""The judge envs by id (``agentic-judge``, ``shared-agentic-judge``, ``isolated-verifier``) and
artifact carrying, through ``run_v1`` against a loopback scripted server playing both the solver
and the judge (the judge really runs ``bash`` in its box and writes its verdict file)."""

from __future__ import annotations

import json
import re

import pytest

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.errors import SandboxError
from verifiers.v1.rollout import run_v1

ANSWERS = {"France": "Paris", "Japan": "Osaka"}
TRUE_CAPITALS = {"Paris", "Tokyo"}


def _judge_prompt(req) -> str | None:
    for m in req.messages:
        if m["role"] == "user" and "## Your verdict" in (m.get("content") or ""):
            return m["content"]
    return None


def script(req, *, write_verdict: bool = True):
    """The solver answers from ANSWERS; the judge lists its box and reads the answer file (turn
    0), grades what it read there (turn 1, by writing the verdict file), then says it is done."""
    prompt = _judge_prompt(req)
    if prompt is None:
        country = re.search(r"capital of (\w+)", req.messages[-1]["content"]).group(1)
        return reply(ANSWERS[country])
    if req.turn == 0:
        return tool_calls(tool_call("bash", {"command": "ls; ls vf-judge; echo ---; cat answer.txt"}, id="c1"))
    if req.turn == 1 and write_verdict:
        seen = req.messages[-1]["content"]
        city = seen.split("---", 1)[1].strip().split()[-1]
        verdict = {"verdicts": [{"name": "solved", "reason": f"answer.txt says {city}", "verdict": "yes" if city in TRUE_CAPITALS else "no"}]}
        command = f"cat > vf-judge/verdict.json <<'EOF'\n{json.dumps(verdict)}\nEOF"
        return tool_calls(tool_call("bash", {"command": command}, id="c2"))
    return reply("Done.")


async def _run(env, srv, **kw):
    client = ModelClient.from_any(srv.base_url)
    try:
        return await run_v1(env, list(env.taskset), client, model="scripted-model", **kw)
    finally:
        await client.aclose()


def _episodes(out):
    return [s["_episode"] for s in sorted(out.state, key=lambda s: s["example_id"])]


def _judge_saw(episode) -> str:
    judge = next(t for t in episode.traces if t.agent.name == "judge")
    return judge.tool_messages[0].content


@pytest.mark.parametrize("env_id", ["agentic-judge", "shared-agentic-judge"])
async def test_agentic_judge_rewards_the_solver_from_the_verdict_file(env_id, tmp_path) -> None:
    env = load_environment({"id": env_id, "taskset": {"id": "vf-capitals", "n": 2}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv, folder=tmp_path)
    assert out["metadata"]["num_errors"] == 0 and out["metadata"]["avg_reward"] == 0.5
    lines = sorted((json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()), key=lambda ln: ln["example_id"])
    for line, expected in zip(lines, (1.0, 0.0), strict=True):
        assert line["ok"] and line["complete"] and line["env"]["id"] == f"{env_id}+vf-capitals" and line["reward"] == expected
        assert [(t["agent"]["name"], t["agent"]["trainable"]) for t in line["traces"]] == [("solver", True), ("judge", False)]
        solver, judge = line["traces"]
        assert solver["rewards"]["judge"] == {"score": expected, "weight": 1.0}
        assert solver["metrics"]["judge/solved"] == expected
        # the task's own rewards ran (on the solver's box) and count for nothing by default
        assert solver["rewards"]["exact"] == {"score": expected, "weight": 0.0}
        assert judge["info"]["verdict"]["verdicts"][0]["verdict"] == ("yes" if expected else "no")
        calls = [c["name"] for n in judge["nodes"] for c in n["message"].get("tool_calls") or []]
        assert calls == ["bash", "bash"]
        saw = next(n["message"]["content"] for n in judge["nodes"] if n["message"]["role"] == "tool")
        assert "trace.json" in saw  # the solver's record was written for the judge
        # shared: the solver's whole box; isolated: only the declared artifact travelled
        assert ("scratch.txt" in saw) is (env_id == "shared-agentic-judge")
        assert any("## Your verdict" in str(n["message"].get("content")) for n in judge["nodes"])


async def test_task_weight_keeps_the_tasks_own_rewards(tmp_path) -> None:
    env = load_environment({"id": "agentic-judge", "taskset": {"id": "vf-capitals", "n": 1}, "score": {"task_weight": 1.0, "judge_weight": 2.0}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    solver = _episodes(out)[0].traces[0]
    # exact 1 + from_artifact 1 (weight 1 each) + judge 1 (weight 2)
    assert solver.reward == 4.0 and solver.rewards["judge"].weight == 2.0


async def test_a_judge_that_writes_no_verdict_fails_the_episode() -> None:
    env = load_environment({"id": "agentic-judge", "taskset": {"id": "vf-capitals", "n": 1}})
    async with ScriptedServer(lambda r: script(r, write_verdict=False)) as srv:
        out = await _run(env, srv)
    (episode,) = _episodes(out)
    solver, judge = episode.traces
    assert not judge.ok and "wrote no verdict" in judge.errors[-1].message
    assert not episode.ok and "judge" not in solver.rewards
    assert out.state[0]["error"] is not None  # counted as an error, not scored 0


async def test_a_verdict_the_solver_planted_is_never_read_as_the_judges() -> None:
    # the solver's task leaves a forged "yes" in the shared box; this judge writes none itself
    env = load_environment({"id": "shared-agentic-judge", "taskset": {"id": "vf-capitals", "n": 1, "plant": True}})
    async with ScriptedServer(lambda r: script(r, write_verdict=False)) as srv:
        out = await _run(env, srv)
    (episode,) = _episodes(out)
    assert not episode.ok and "judge" not in episode.traces[0].rewards
    assert "wrote no verdict" in episode.traces[1].errors[-1].message


async def test_a_criterion_the_judge_did_not_answer_is_an_error(tmp_path) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text('[[criteria]]\nname = "solved"\ntext = "solved"\n\n[[criteria]]\nname = "tidy"\ntext = "tidy"\n')
    env = load_environment({"id": "agentic-judge", "taskset": {"id": "vf-capitals", "n": 1}, "task": {"rubric": str(rubric)}})
    async with ScriptedServer(script) as srv:  # answers only `solved`
        out = await _run(env, srv)
    (episode,) = _episodes(out)
    assert not episode.ok and "tidy" in episode.errors[0].message
    assert "- tidy: tidy (no, yes)" in _judge_prompt(srv.requests[-1])


def test_the_judge_must_run_code_and_its_task_config_is_checked_first(tmp_path) -> None:
    with pytest.raises(ValueError, match="cannot run code"):
        load_environment({"id": "agentic-judge", "taskset": {"id": "vf-capitals"}, "judge": {"harness": {"id": "null"}}})
    with pytest.raises(FileNotFoundError):
        load_environment({"id": "shared-agentic-judge", "taskset": {"id": "vf-capitals"}, "task": {"rubric": str(tmp_path / "missing.toml")}})


async def test_isolated_verifier_scores_in_a_fresh_box_with_the_artifacts() -> None:
    env = load_environment({"id": "isolated-verifier", "taskset": {"id": "vf-capitals", "n": 2}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    for episode, expected in zip(_episodes(out), (1.0, 0.0), strict=True):
        assert episode.ok and episode.env.id == "isolated-verifier+vf-capitals"
        (trace,) = episode.traces
        assert trace.rewards["exact"].score == expected
        assert trace.rewards["from_artifact"].score == expected  # read from the restored answer.txt
        assert trace.metrics["clean_box"] == 1.0  # the solver's scratch file did not travel
        assert trace.state.artifacts and "answer.txt" in trace.state.artifacts


async def test_single_agent_box_is_not_clean_for_contrast() -> None:
    env = load_environment({"taskset": {"id": "vf-capitals", "n": 1}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    assert _episodes(out)[0].traces[0].metrics["clean_box"] == 0.0


async def test_isolated_verifier_refuses_judges() -> None:
    env = load_environment({"id": "isolated-verifier", "taskset": {"id": "vf-capitals", "n": 1, "task": {"judges": [{"id": "reference", "answer_field": "capital"}]}}})
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    (episode,) = _episodes(out)
    assert not episode.ok and "judges are not supported" in episode.errors[0].message


# --- artifacts ----------------------------------------------------------------------------------


async def test_artifacts_round_trip_and_hostile_paths(tmp_path) -> None:
    import io
    import tarfile

    from verifiers.v1.artifacts import collect, restore
    from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime
    from verifiers.v1.task import Artifact

    src, dst = SubprocessRuntime(SubprocessConfig()), SubprocessRuntime(SubprocessConfig())
    await src.start()
    await dst.start()
    try:
        await src.write("out/a.txt", "A")
        await src.write("out/skip.log", "x")
        await src.write("out/sub/b.txt", "B")
        got = await collect(src, [Artifact(source="out", exclude=["*.log"]), Artifact(source="gone.txt", required=False)])
        assert got["gone.txt"] is None
        await dst.write("out/stale.txt", "old")
        await restore(dst, got)
        assert sorted(p.relative_to(dst.workdir).as_posix() for p in dst.workdir.rglob("*") if p.is_file()) == ["out/a.txt", "out/sub/b.txt"]
        with pytest.raises(SandboxError, match="absolute path"):
            await collect(src, [Artifact(source="/etc/passwd")])
        with pytest.raises(SandboxError, match="not a path inside"):
            await collect(src, [Artifact(source="../x")])
        with pytest.raises(SandboxError, match="is missing"):
            await collect(src, [Artifact(source="nope.txt")])
        (src.workdir / "link").symlink_to("/etc")
        with pytest.raises(SandboxError, match="is a link"):
            await collect(src, [Artifact(source="link")])
        with pytest.raises(SandboxError, match="exceed 1 bytes"):
            await collect(src, [Artifact(source="out")], max_bytes=1)
        # a forged archive escaping its root, or carrying a link, is refused before anything is written
        for name, kind in (("out/../../evil.txt", tarfile.REGTYPE), ("out/ln", tarfile.SYMTYPE)):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, "/etc/passwd"
                tar.addfile(info, io.BytesIO(b""))
            with pytest.raises(SandboxError):
                await restore(dst, {"out": buf.getvalue()})
            assert (dst.workdir / "out" / "a.txt").exists()  # nothing was cleared either
    finally:
        await src.stop()
        await dst.stop()


# --- through `vf eval` (a real subprocess) ------------------------------------------------------


def test_vf_eval_runs_a_judge_env_and_a_plugged_judge_from_toml(tmp_path) -> None:
    import os

    from tests.cli.helpers import REPO, run_vf
    from tests.v1.conftest import PACKAGES

    def both(req):
        # the reference judge (plugged from the TOML file) grades the solver's answer; the agentic judge acts
        content = req.messages[-1]["content"] or ""
        if "<reference>" in content:
            answer = re.search(r"<answer>\n(.*?)\n</answer>", content, re.S).group(1)
            return reply("yes" if answer in TRUE_CAPITALS else "no")
        return script(req)

    config = tmp_path / "eval.toml"
    with ScriptedServer(both) as srv:
        config.write_text(f"""
model = "scripted-model"
output_dir = "out"

[client]
base_url = "{srv.base_url}"

[select]
limit = 2

[run]
dir = "judged"

[env]
id = "shared-agentic-judge"

[env.score]
task_weight = 1.0

[env.taskset]
id = "vf-capitals"

[[env.taskset.task.judges]]
id = "reference"
answer_field = "capital"
name = "ref"
""")
        res = run_vf("eval", "@", str(config), cwd=tmp_path, env={"PYTHONPATH": f"{REPO}{os.pathsep}{PACKAGES}"})
        assert res.returncode == 0, res.stderr
    lines = sorted((json.loads(x) for x in (tmp_path / "out" / "judged" / "traces.jsonl").read_text().splitlines()), key=lambda ln: ln["example_id"])
    assert [ln["env"]["id"] for ln in lines] == ["shared-agentic-judge+vf-capitals"] * 2
    for line, expected in zip(lines, (1.0, 0.0), strict=True):
        solver = line["traces"][0]
        assert solver["rewards"]["ref"] == {"score": expected, "weight": 1.0}  # the plugged judge's reply
        assert solver["rewards"]["judge"]["score"] == expected  # the agentic judge's verdict file
        assert line["reward"] == 4 * expected  # exact + from_artifact + ref + judge
        assert solver["info"]["judge_calls"][0]["request"]["model"] == "scripted-model"
    meta = json.loads((tmp_path / "out" / "judged" / "metadata.json").read_text())
    assert meta["num_errors"] == 0 and meta["avg_reward"] == 2.0


def test_the_judges_task_is_minted_from_the_solvers_trace(tmp_path) -> None:
    import verifiers.v1 as vf
    from verifiers.v1.envs.agentic_judge.env import TRACE_FILE, JudgeTask, JudgeTaskConfig, TextFile

    task = vf.Task(vf.TaskData(idx=3, prompt="Write hello.txt"))
    solution = vf.Trace.for_task(task)
    reply_ = vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content="done", reasoning_content="secret plan"), finish_reason="stop")
    solution.commit_turn([vf.UserMessage(content="Write hello.txt")], reply_)
    policy = tmp_path / "policy.md"
    policy.write_text("Check the work carefully. {not-a-field}")

    minted = JudgeTask.from_trace(solution, JudgeTaskConfig(prompt=TextFile(path=policy), hint="look at hello.txt"), share_runtime=False)
    prompt = minted.data.prompt
    assert prompt.startswith("Check the work carefully. {not-a-field}")  # a policy without {prompt}: the task follows
    order = [prompt.index(x) for x in ("## The task the agent was given\n\nWrite hello.txt", "## Hints\n\nlook at hello.txt", "## Your verdict", "fresh working folder")]
    assert order == sorted(order) and "- solved:" in prompt
    assert minted.data.idx == 3
    assert "secret plan" not in minted.files[TRACE_FILE].decode()  # hidden reasoning left out by default
    kept = JudgeTask.from_trace(solution, JudgeTaskConfig(include_hidden_reasoning=True))
    assert "secret plan" in kept.files[TRACE_FILE].decode() and "agent's own working folder" in kept.data.prompt


@pytest.mark.parametrize(("failures", "retries"), [(1, 1), (5, 1)])
async def test_isolated_verifier_retries_in_a_fresh_box(failures, retries) -> None:
    from verifiers.v1.envs.isolated_verifier import IsolatedVerifierEnv, IsolatedVerifierEnvConfig

    boxes = []

    class Flaky(IsolatedVerifierEnv):
        async def stage_verifier(self, task, solution, runtime):
            boxes.append(runtime.workdir)
            if len(boxes) <= failures:
                raise RuntimeError("the box broke")
            await super().stage_verifier(task, solution, runtime)

    config = IsolatedVerifierEnvConfig.model_validate({"id": "isolated-verifier", "taskset": {"id": "vf-capitals", "n": 1}, "verifier": {"retries": retries}})
    env = Flaky(config)
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    (episode,) = _episodes(out)
    (trace,) = episode.traces
    assert len(boxes) == min(failures + 1, retries + 1) and len(set(boxes)) == len(boxes)  # a new box each attempt
    if failures <= retries:
        assert episode.ok and trace.rewards["from_artifact"].score == 1.0 and not trace.errors
    else:
        assert not episode.ok and "verifier attempt 2 of 2: RuntimeError: the box broke" in trace.errors[-1].message
        assert out.state[0]["error"] is not None

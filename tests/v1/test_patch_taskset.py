"""A repository-repair taskset written against the original's module paths (``tests/v1/packages/
vf_patchfix``) runs unmodified end to end: the bash harness in the subprocess runtime, a scripted
model that fixes the bug (reward 1, its commit inside the captured patch) and one that only looks
(reward 0, an empty patch); the repository's own untracked file is never credited to the agent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1


def _fixer(req):
    last = req.messages[-1]
    if last["role"] == "user":
        return tool_calls(tool_call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py && git commit -qam fix && echo ok"}, id="c1"))
    return reply("fixed")


def _looker(req):
    if req.messages[-1]["role"] == "user":
        return tool_calls(tool_call("bash", {"command": "cat calc.py"}, id="c1"))
    return reply("looks fine to me")


async def _run(script, tmp_path):
    # the task runs `python3 -m pytest`: this interpreter's (it has pytest), whatever the machine's is
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    runtime = {"type": "subprocess", "workdir": str(tmp_path), "env": {"PATH": path}}
    env = load_environment({"taskset": {"id": "vf-patchfix"}, "agent": {"harness": {"id": "bash"}, "runtime": runtime}})
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
    (trace,) = out.state[0]["_episode"].traces
    return trace


async def test_a_fix_scores_one_and_its_commit_is_in_the_patch(tmp_path) -> None:
    trace = await _run(_fixer, tmp_path / "fix")
    assert trace.errors == []
    assert trace.rewards["fixed"].score == 1.0
    patch = trace.info["patch"]
    assert "-    return a - b" in patch and "+    return a + b" in patch
    assert "README.txt" not in patch and "patch_error" not in trace.info
    assert trace.metrics["patch_lines"] == float(len(patch.splitlines())) > 0


async def test_looking_without_fixing_scores_zero_with_an_empty_patch(tmp_path) -> None:
    trace = await _run(_looker, tmp_path / "look")
    assert trace.errors == []
    assert trace.rewards["fixed"].score == 0.0
    assert trace.info["patch"] == "" and trace.metrics["patch_lines"] == 0.0

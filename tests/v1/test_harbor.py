"""Harbor task folders (our own small ones) through the built-in ``harbor`` taskset on the
``sandbox`` runtime: loaded with the original's config keys, the environment declared without
Docker (files + requirements.txt, built into a cached environment), graded by ``tests/test.sh``
in the sandbox; Docker-only tasks refused in one line."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import ensure_bwrap
from tests.v1.test_agent_harness import SUBMIT
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.loading import load_taskset
from verifiers.v1.rollout import run_v1
from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime
from verifiers.v1.tasksets.harbor import HarborTask, HarborTaskset, run_verifier
from verifiers.v1.trace import Trace

TEST_SH = """#!/bin/bash
if python -m pytest -q -p no:cacheprovider /tests/test_calc.py > /logs/verifier/out.txt 2>&1; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
TEST_JSON_SH = """#!/bin/bash
cd /app
python3 -c 'import calc, json; ok = calc.add(2, 3) == 5; print(json.dumps({"reward": float(ok), "style": 0.5}))' > /logs/verifier/reward.json
"""


def _task(root: Path, name: str, toml: str, env: dict[str, str] | None = None, test_sh: str = TEST_SH) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text("calc.add(2, 3) returns -1 instead of 5. Fix calc.add in calc.py.\n")
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (d / "solution" / "solve.sh").write_text("sed -i 's/a - b/a + b/' calc.py\n")
    if env is not None:
        (d / "environment").mkdir()
        for rel, text in env.items():
            (d / "environment" / rel).write_text(text)
    return d


BASE = """version = "1.0"
[metadata]
difficulty = "easy"
category = "debugging"
tags = ["python"]
[agent]
timeout_sec = 300.0
[verifier]
timeout_sec = 120.0
[environment]
workdir = "/app"
cpus = 1
memory_mb = 2048
"""


@pytest.fixture(scope="module")
def dataset() -> Iterator[Path]:
    ensure_bwrap()
    box = Path(tempfile.mkdtemp(prefix="vf-harbor-sb-"))
    box.chmod(0o711)
    previous = os.environ.get("VF_SANDBOX_DIR")
    os.environ["VF_SANDBOX_DIR"] = str(box)
    root = Path(tempfile.mkdtemp(prefix="vf-harbor-"))
    env = {"calc.py": "def add(a, b):\n    return a - b\n", "requirements.txt": "pytest==8.3.4\n"}
    _task(root, "fix-add", BASE, env)
    _task(root, "fix-add-json", BASE, {"calc.py": env["calc.py"]}, test_sh=TEST_JSON_SH)
    _task(root, "needs-dockerfile", BASE, {"Dockerfile": "FROM python:3.12\n", "calc.py": env["calc.py"]})
    _task(root, "needs-image", BASE + 'docker_image = "python:3.12-slim"\n', {"calc.py": env["calc.py"]})
    yield root
    shutil.rmtree(root, ignore_errors=True)
    if previous is None:
        os.environ.pop("VF_SANDBOX_DIR", None)
    else:
        os.environ["VF_SANDBOX_DIR"] = previous
    shutil.rmtree(box, ignore_errors=True)


def test_folders_load_with_the_original_keys_and_a_dockerfile_is_refused_in_one_line(dataset) -> None:
    with pytest.raises(ValueError) as err:
        list(load_taskset({"id": "harbor", "dataset": str(dataset)}))
    msg = str(err.value)
    assert "needs-dockerfile" in msg and "Dockerfile" in msg and "Docker" in msg and "\n" not in msg
    ts = load_taskset({"id": "harbor", "dataset": str(dataset), "tasks": ["fix-add", "needs-image"], "ignore_timeouts": False,
                       "timeout_multiplier": 2.0, "task": {"reward_key": "reward"}})  # fmt: skip
    assert isinstance(ts, HarborTaskset)
    fix, image = list(ts)
    assert isinstance(fix, HarborTask) and fix.data.name == "fix-add" and fix.data.prompt.startswith("calc.add(2, 3)")
    assert fix.data.requirements == ["pytest==8.3.4"] and fix.data.workdir == "/app" and fix.data.image is None
    assert fix.data.timeout.agent == 600.0 and fix.data.timeout.scoring == 240.0 and fix.data.resources.memory == 2.0
    assert fix.data.difficulty == "easy" and fix.data.tags == ["python"] and fix.data.upload_environment
    assert image.data.image == "python:3.12-slim"
    # ignore_dockerfile loads it (its files only; the Dockerfile is not built)
    loaded = list(load_taskset({"id": "harbor", "dataset": str(dataset), "tasks": ["needs-dockerfile"], "ignore_dockerfile": True}))
    assert loaded[0].data.image is None
    with pytest.raises(ValueError, match="local folder"):
        list(load_taskset({"id": "harbor", "dataset": "someorg/not-downloaded"}))


async def test_a_harbor_folder_end_to_end_with_mini_swe_agent_in_the_sandbox(dataset, mini_tools) -> None:
    def script(req):
        if not [m for m in req.messages if m["role"] == "tool"]:
            return tool_calls(tool_call("bash", {"command": "pwd; sed -i 's/a - b/a + b/' calc.py"}, id="c1"))
        return tool_calls(tool_call("bash", {"command": SUBMIT}, id="c2"))

    env = load_environment({"taskset": {"id": "harbor", "dataset": str(dataset), "tasks": ["fix-add", "needs-image"]},
                            "agent": {"harness": {"id": "mini_swe_agent"}, "runtime": {"type": "sandbox", "timeout": 120}}})  # fmt: skip
    env.check()
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
    fixed, refused = (s["_episode"].traces[0] for s in out.state)
    assert fixed.errors == [] and out.state[0]["reward"] == 1.0 and fixed.info["mini_swe_agent"]["exit_status"] == "Submitted"
    # the Docker-image task: refused on sandbox, one line, no model call made
    (error,) = refused.errors
    assert "python:3.12-slim" in error.message and "Docker" in error.message and "\n" not in error.message
    assert refused.calls == [] and out.state[1]["reward"] == 0.0


async def test_the_reference_solution_scores_1_and_reward_json_values_become_metrics(dataset) -> None:
    ts = load_taskset({"id": "harbor", "dataset": str(dataset), "tasks": ["fix-add", "fix-add-json"]})
    for task in ts:
        rt = SandboxRuntime(SandboxConfig(timeout=60))
        await rt.start()
        try:
            trace = Trace.for_task(task)
            await task.setup(trace, rt)
            before = await run_verifier(rt, Path(task.data.task_dir), task.data.workdir, {}, 60)
            solve = (Path(task.data.task_dir) / "solution" / "solve.sh").read_text()
            assert (await rt.run(solve)).ok
            scores = await task.solved(rt, trace)
        finally:
            await rt.stop()
        assert before["reward"] == 0.0 and scores == {"reward": 1.0}
        if task.data.name == "fix-add-json":
            assert trace.metrics["style"] == 0.5 and before == {"reward": 0.0, "style": 0.5}


async def test_harbor_and_task_environments_are_refused_on_the_subprocess_runtime_in_one_line(dataset) -> None:
    from verifiers.v1.errors import SandboxError, TaskError
    from verifiers.v1.runtimes import SubprocessRuntime

    (task,) = load_taskset({"id": "harbor", "dataset": str(dataset), "tasks": ["fix-add"]})
    rt = SubprocessRuntime()
    await rt.start()
    try:
        with pytest.raises(TaskError, match='type = "sandbox"'):
            await task.setup(Trace.for_task(task), rt)
        with pytest.raises(SandboxError) as err:
            await rt.prepare_environment(["pytest==8.3.4"], files={"a.txt": "x"})
        assert "\n" not in str(err.value) and "sandbox" in str(err.value)
        await rt.prepare_environment(files={"a.txt": "x"})  # files alone: written
        assert (rt.workdir / "a.txt").read_text() == "x"
    finally:
        await rt.stop()

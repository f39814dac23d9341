"""repo-repair in the real bubblewrap sandbox: every committed bug is caught by its hidden tests and
fixed by its reversal; generation is deterministic for its seed (regenerated offline from the committed
package sources); and a scripted model driving the `bash` harness earns reward 1 by applying the fix
and 0 by submitting the bug untouched."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import ensure_bwrap
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1
from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

ENV_DIR = Path(__file__).resolve().parents[2] / "environments" / "repo-repair"
if str(ENV_DIR) not in sys.path:  # the generator sits beside the package module, outside the wheel
    sys.path.insert(0, str(ENV_DIR))

import repo_repair as rr  # noqa: E402


def _generator():
    spec = importlib.util.spec_from_file_location("repo_repair_generate", ENV_DIR / "repo_repair_generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def _sandbox_dir() -> Iterator[Path]:
    # our own sandbox root (the sandbox's uid must traverse to it; pytest's tmp folders are private)
    root = Path(tempfile.mkdtemp(prefix="vf-repo-repair-test-"))
    root.chmod(0o711)
    previous = os.environ.get("VF_SANDBOX_DIR")
    os.environ["VF_SANDBOX_DIR"] = str(root)
    ensure_bwrap()
    yield root
    if previous is None:
        os.environ.pop("VF_SANDBOX_DIR", None)
    else:
        os.environ["VF_SANDBOX_DIR"] = previous
    shutil.rmtree(root, ignore_errors=True)


def _leftovers(root: Path) -> list[Path]:
    """Sandbox work folders (and uv caches) still on disk."""
    return list(root.glob("run-*"))


def _runtime() -> SandboxRuntime:
    return SandboxRuntime(SandboxConfig(timeout=300, limits={"memory_mb": 2048, "processes": 256}))


async def test_every_kept_bug_is_caught_by_its_hidden_tests_and_fixed_by_its_reversal(_sandbox_dir: Path) -> None:
    """Per task, in its own sandbox: the hidden failing tests fail on the bug (their test files run
    against the buggy repository), and after the task's real set-up the reference fix (the bug's
    patch reversed in the agent's work folder) makes the whole scored suite pass (`validate`, which
    scores through the same path as the reward)."""
    tasks = list(rr.RepoRepair(rr.RepairConfig()).load())
    assert len(tasks) >= 50

    async def one(task: rr.RepairTask) -> tuple[str, list[str], bool]:
        runtime = _runtime()
        await runtime.start()
        try:
            files = sorted({node.split("::")[0] for node in task.data.fail_to_pass})
            buggy = await rr.run_suite(runtime, task.package(), task.buggy_files(), paths=files)
            still_passing = [t for t in task.data.fail_to_pass if buggy.passed(t)]
            if buggy.timed_out or buggy.collect_errors or not buggy.outcomes:
                still_passing = [f"no clean run: {buggy.collect_errors[:3]} {buggy.output[-500:]}"]
            await task.setup(None, runtime)  # type: ignore[arg-type]  (setup does not read the trace)
            fixed = await task.validate(runtime)
        finally:
            await runtime.stop()
        return task.data.id or "", still_passing, fixed

    start = time.monotonic()
    results = await rr.gather_limited([one(t) for t in tasks], limit=3)
    elapsed = time.monotonic() - start
    print(f"\n{len(tasks)} tasks checked in {elapsed:.1f} s")
    not_caught = [(tid, left) for tid, left, _ in results if left]
    not_fixed = [tid for tid, _, fixed in results if not fixed]
    assert not not_caught, not_caught[:5]
    assert not not_fixed, not_fixed[:5]
    assert not _leftovers(_sandbox_dir)  # every sandbox's work folder is gone


async def test_generation_is_deterministic_for_its_seed() -> None:
    """Regenerating a package from the committed sources (no network) with the committed seed gives
    the committed tasks, byte for byte; the candidate order is a function of the seed."""
    gen = _generator()
    pkg = rr.packages()["parse"]
    files = rr.package_files("parse")
    candidates = [m for path in pkg.sources for m in gen.mutations(path, files[path])]
    assert len(candidates) > 50 and len({m.operator for m in candidates}) >= 7
    again = [m for path in pkg.sources for m in gen.mutations(path, files[path])]
    assert candidates == again
    first = gen.ordered(candidates, random.Random("7:parse"))
    assert first == gen.ordered(list(candidates), random.Random("7:parse"))
    assert first != gen.ordered(candidates, random.Random("8:parse"))

    scored, tasks = await gen.build_package(pkg, files, seed=gen.SEED, per_package=2, max_attempts=gen.MAX_ATTEMPTS,
                                            timeout=60, log=lambda line: None)  # fmt: skip
    committed = [r for r in rr.load_records() if r["package"] == "parse"]
    assert scored == list(pkg.tests)
    assert tasks == committed[:2]


def _fix_command(task: rr.RepairTask) -> str:
    return (f"cat > .vf/fix.diff <<'VF_PATCH_END'\n{task.data.patch}VF_PATCH_END\n"
            "git apply -R .vf/fix.diff && git diff --stat && python3 .vf/pytest -q 2>&1 | tail -1")  # fmt: skip


async def test_a_scripted_agent_that_fixes_the_bug_gets_1_and_one_that_does_not_gets_0(_sandbox_dir: Path) -> None:
    env = load_environment({
        "taskset": {"id": "repo-repair", "packages": ["parse"]},
        "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox", "timeout": 120}, "max_turns": 4},
    })  # fmt: skip
    env.check()
    fixer, idler = list(env.taskset.take(2))
    outputs: dict[str, list[str]] = {fixer.data.id: [], idler.data.id: []}  # type: ignore[dict-item]

    def script(req):
        user = next(m["content"] for m in req.messages if m["role"] == "user")
        task = fixer if user == fixer.data.prompt else idler
        last = req.messages[-1]
        if last["role"] == "user":
            command = _fix_command(task) if task is fixer else "git status --short; python3 .vf/pytest -q 2>&1 | tail -1"
            return tool_calls(tool_call("bash", {"command": command}, id="c1"))
        outputs[task.data.id].append(last["content"])  # type: ignore[index]
        return reply("Fixed." if task is fixer else "The tests pass; I see nothing to fix.")

    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, [fixer, idler], client, model="scripted-model")
        finally:
            await client.aclose()
    by_id = {st["_task"].data.id: st for st in out.state}
    fixed, idle = by_id[fixer.data.id], by_id[idler.data.id]
    assert fixed["reward"] == 1.0 and idle["reward"] == 0.0, (fixed.get("error"), idle.get("error"))
    assert fixed["metrics"]["fail_to_pass"] == 1.0 and fixed["metrics"]["pass_to_pass"] == 1.0
    assert idle["metrics"]["fail_to_pass"] == 0.0 and idle["metrics"]["pass_to_pass"] == 1.0
    (fix_out,), (idle_out,) = outputs[fixer.data.id], outputs[idler.data.id]  # type: ignore[index]
    assert fix_out.startswith("exit code 0") and "1 file changed" in fix_out and " passed" in fix_out, fix_out
    # the agent's copy lacks the failing tests: its suite passes on the bug, and the tree is clean
    assert idle_out.startswith("exit code 0") and " passed" in idle_out and "failed" not in idle_out, idle_out
    for st in (fixed, idle):
        trace = st["_episode"].traces[0]
        assert trace.agent.runtime["type"] == "sandbox" and not trace.errors
    assert not _leftovers(_sandbox_dir)


def test_reward_needs_a_runtime_and_is_not_rescored_offline() -> None:
    """`resolved` asks for the rollout's runtime: re-scoring a saved trace (vf replay) leaves it out
    rather than scoring the untouched repository."""
    from verifiers.v1.scoring import needs_runtime

    task = next(iter(rr.RepoRepair(rr.RepairConfig(packages=["schema"])).load()))
    (reward,) = task.hooks("reward")
    assert reward.__name__ == "resolved" and needs_runtime(reward)
    assert asyncio.iscoroutinefunction(reward)

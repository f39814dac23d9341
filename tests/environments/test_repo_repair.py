"""repo-repair in the real bubblewrap sandbox: every committed bug is caught by its hidden tests and
fixed by its reversal; generation is deterministic for its seed (regenerated offline from the committed
package sources); and a scripted model driving the `bash` harness earns reward 1 by applying the fix
and 0 by submitting the bug untouched."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import private_sandbox_root
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1
from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

ENV_DIR = Path(__file__).resolve().parents[2] / "environments" / "repo-repair"
if str(ENV_DIR) not in sys.path:  # the generator sits beside the package module, outside the wheel
    sys.path.insert(0, str(ENV_DIR))

import repo_repair as rr  # noqa: E402
import repo_repair_generate as gen  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _sandbox_dir() -> Iterator[Path]:
    with private_sandbox_root("vf-repo-repair-test-") as root:
        yield root


def _leftovers(root: Path) -> list[Path]:
    """Sandbox work folders (and uv caches) still on disk."""
    return list(root.glob("run-*"))


def _warm_folders(root: Path) -> list[Path]:
    """Work folders of warm boxes still on disk."""
    return list(root.glob("warm-*"))


def _runtime() -> SandboxRuntime:
    return SandboxRuntime(SandboxConfig(timeout=300, limits={"memory_mb": 2048, "processes": 256}))


async def test_every_kept_bug_is_caught_by_its_hidden_tests_and_fixed_by_its_reversal(_sandbox_dir: Path) -> None:
    """Caught: per task, the package's whole test suite on the buggy repository (every test in it, as
    the scorer runs it) fails exactly the recorded `fail_to_pass` tests, and no other scored test.
    Fixed: the bug's patch reversed gives the pristine file byte for byte, and the pristine repository
    passes every scored test (one run per package); and per package one task goes through the real
    reward path: its set-up work folder, the reversal applied there, scored by `validate`."""
    tasks = list(rr.RepoRepair(rr.RepairConfig()).load())
    assert len(tasks) >= 50

    async def in_sandbox(job):
        runtime = _runtime()
        await runtime.start()
        try:
            return await job(runtime)
        finally:
            await runtime.stop()

    def caught(task: rr.RepairTask):
        async def job(runtime):
            result = await rr.run_suite(runtime, task.package(), task.buggy_files())
            failing = sorted(t for t in task.package().tests if not result.passed(t))
            return task.data.id, failing == sorted(task.data.fail_to_pass), result

        return in_sandbox(job)

    def pristine(name: str):
        async def job(runtime):
            result = await rr.run_suite(runtime, rr.packages()[name], rr.package_files(name))
            return name, [t for t in rr.packages()[name].tests if not result.passed(t)]

        return in_sandbox(job)

    def reward_path(task: rr.RepairTask):
        async def job(runtime):
            await task.setup(None, runtime)  # type: ignore[arg-type]  (setup does not read the trace)
            return task.data.id, await task.validate(runtime)

        return in_sandbox(job)

    for task in tasks:
        pristine_file = rr.package_files(task.data.package)[task.data.file]
        reversed_file = rr.apply_patch(task.buggy_files()[task.data.file].decode(), task.data.patch, reverse=True)
        assert reversed_file.encode() == pristine_file, task.data.id
    first_of_each = {t.data.package: t for t in reversed(tasks)}
    start = time.monotonic()
    results = await rr.gather_limited([*(caught(t) for t in tasks), *(pristine(n) for n in sorted(rr.packages())),
                                       *(reward_path(t) for t in first_of_each.values())], limit=3)  # fmt: skip
    print(f"\n{len(tasks)} bugs, {len(rr.packages())} pristine packages and {len(first_of_each)} reward paths "
          f"checked in the sandbox in {time.monotonic() - start:.1f} s")
    bugs, packages, paths = results[:len(tasks)], results[len(tasks):len(tasks) + len(rr.packages())], results[-len(first_of_each):]
    wrong = [(tid, r.failing[:5], r.collect_errors[:2], r.output[-300:]) for tid, ok, r in bugs if not ok]
    assert not wrong, wrong[:3]
    assert all(not failing for _, failing in packages), packages
    assert all(fixed for _, fixed in paths), paths
    assert not _leftovers(_sandbox_dir)  # every sandbox's work folder is gone


async def test_generation_is_deterministic_for_its_seed() -> None:
    """Regenerating a package from the committed sources (no network) with the committed seed gives
    the committed tasks, byte for byte; the candidate order is a function of the seed."""
    pkg = rr.packages()["parse"]
    files = rr.package_files("parse")
    candidates = [m for path in pkg.sources for m in gen.mutations(path, files[path])]
    assert len(candidates) > 50 and len({m.operator for m in candidates}) >= 7
    again = [m for path in pkg.sources for m in gen.mutations(path, files[path])]
    assert candidates == again
    first = gen.ordered(candidates, random.Random("7:parse"))
    assert first == gen.ordered(list(candidates), random.Random("7:parse"))
    assert first != gen.ordered(candidates, random.Random("8:parse"))

    scored, tasks = await gen.build_package(pkg, files, seed=gen.SEED, per_package=1, max_attempts=gen.MAX_ATTEMPTS,
                                            timeout=60, log=lambda line: None)  # fmt: skip
    committed = [r for r in rr.load_records() if r["package"] == "parse"]
    assert scored == list(pkg.tests)
    assert tasks == committed[:1]


def _fix_command(task: rr.RepairTask) -> str:
    return (f"cat > .vf/fix.diff <<'VF_PATCH_END'\n{task.data.patch}VF_PATCH_END\n"
            "git apply -R .vf/fix.diff && git diff --stat && python3 .vf/pytest -q 2>&1 | tail -1; echo \"exit $?\"")  # fmt: skip


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_scripted_agent_that_fixes_the_bug_gets_1_and_one_that_does_not_gets_0(_sandbox_dir: Path, warm: bool) -> None:
    # warm: both rollouts (the agent's commands and the hidden tests) run in pre-started boxes of one pool
    env = load_environment({
        "taskset": {"id": "repo-repair", "packages": ["parse"]},
        "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox", "timeout": 120, "warm": warm}, "max_turns": 4},
    })  # fmt: skip
    env.check()
    fixer, idler = list(env.taskset.take(2))
    outputs: dict[str, list[str]] = {fixer.data.id: [], idler.data.id: []}  # type: ignore[dict-item]

    def script(req):
        user = next(m["content"] for m in req.messages if m["role"] == "user")
        task = fixer if user == fixer.data.prompt else idler
        last = req.messages[-1]
        if last["role"] == "user":
            command = _fix_command(task) if task is fixer else 'git status --short; python3 .vf/pytest -q 2>&1 | tail -1; echo "exit $?"'
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
    # the bash tool answers with the output alone (as the original's); the commands print their status
    assert fix_out.endswith("exit 0\n") and "1 file changed" in fix_out and " passed" in fix_out, fix_out
    # the agent's copy lacks the failing tests: its suite passes on the bug, and the tree is clean
    summary, status = idle_out.splitlines()  # nothing from `git status --short`: the tree is clean
    assert status == "exit 0" and " passed" in summary and "failed" not in summary, idle_out
    for st in (fixed, idle):
        trace = st["_episode"].traces[0]
        assert trace.agent.runtime["type"] == "sandbox" and not trace.errors
    if warm:
        from verifiers.v1.runtimes import close_warm_sandboxes

        assert _warm_folders(_sandbox_dir), "no warm box was used"
        close_warm_sandboxes()
        assert not _warm_folders(_sandbox_dir)
    assert not _leftovers(_sandbox_dir)


def test_reward_needs_a_runtime_and_is_not_rescored_offline() -> None:
    """`resolved` asks for the rollout's runtime: re-scoring a saved trace (vf replay) leaves it out
    rather than scoring the untouched repository."""
    from verifiers.v1.scoring import needs_runtime

    task = next(iter(rr.RepoRepair(rr.RepairConfig(packages=["schema"])).load()))
    (reward,) = task.hooks("reward")
    assert reward.__name__ == "resolved" and needs_runtime(reward)
    assert asyncio.iscoroutinefunction(reward)

"""A one-task repair taskset for the agent-harness tests: ``calc.add`` subtracts; the hidden test
decides the reward, run in the rollout's sandbox with the task's own environment (pytest, built
once from the package index into a cached tool folder: no Docker image)."""

from __future__ import annotations

import verifiers.v1 as vf

CALC = "def add(a, b):\n    return a - b\n"
HIDDEN_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
REQUIREMENTS = ["pytest==8.3.4"]


class BugfixData(vf.TaskData):
    files: dict[str, str] = {}
    hidden_tests: dict[str, str] = {}
    requirements: list[str] = []


class BugfixTask(vf.Task[BugfixData]):
    async def setup(self, trace, runtime) -> None:
        await runtime.prepare_environment(self.data.requirements, files=self.data.files)

    @vf.reward(weight=1.0)
    async def tests_pass(self, runtime) -> float:
        # the hidden tests arrive only now (the agent never saw them), then run with no network
        await runtime.write(".hidden/test_hidden.py", self.data.hidden_tests["test_hidden.py"])
        r = await runtime.run("python -m pytest -q -p no:cacheprovider .hidden/test_hidden.py", timeout=120)
        return 1.0 if r.returncode == 0 else 0.0


class BugfixConfig(vf.TasksetConfig):
    id: str = "vf-bugfix"


class BugfixTaskset(vf.Taskset[BugfixTask, BugfixConfig]):
    def load(self):
        yield BugfixTask(BugfixData(
            idx=0, name="calc-add", prompt="calc.py: add(2, 3) returns -1 instead of 5. Fix calc.add.",
            files={"calc.py": CALC}, hidden_tests={"test_hidden.py": HIDDEN_TEST}, requirements=REQUIREMENTS,
        ))  # fmt: skip


__all__ = ["BugfixTaskset"]

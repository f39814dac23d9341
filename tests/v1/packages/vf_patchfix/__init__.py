"""A repository-repair taskset written the way tasksets for the original 0.4.0 are: it imports from
the original's module paths (``verifiers.v1.configs.*``, ``runtimes.base``, ``utils.git``,
``utils.score``), records the base commit and the repository's untracked files at setup in host
memory, captures the agent's patch at finalize, and scores by pytest's outcomes read with
``parse_pytest_outcomes``."""

from __future__ import annotations

from verifiers.v1.configs.task import TaskConfig
from verifiers.v1.configs.taskset import TasksetConfig
from verifiers.v1.runtimes.base import Runtime
from verifiers.v1.task import Task, TaskData
from verifiers.v1.taskset import Taskset
from verifiers.v1.trace import Trace
from verifiers.v1.utils.decorators import metric, reward
from verifiers.v1.utils.git import capture_patch, resolve_head, snapshot_untracked
from verifiers.v1.utils.score import parse_pytest_outcomes

GIT = {"GIT_AUTHOR_NAME": "vf", "GIT_AUTHOR_EMAIL": "vf@example.invalid", "GIT_COMMITTER_NAME": "vf",
       "GIT_COMMITTER_EMAIL": "vf@example.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
    "README.txt": "shipped untracked with the repository\n",
}


class RepairData(TaskData):
    failing: list[str]


class RepairTask(Task[RepairData]):
    _base: dict[int, tuple[str, list[str]]] = {}

    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        for path, text in FILES.items():
            await runtime.write(path, text.encode())
        script = "git init -q -b main && git add calc.py test_calc.py && git commit -qm base"
        result = await runtime.run(["sh", "-c", script], GIT)
        assert result.exit_code == 0, result.stderr
        # kept on the host, where the agent cannot change them
        RepairTask._base[id(runtime)] = (await resolve_head(runtime, GIT), await snapshot_untracked(runtime, GIT))

    async def finalize(self, trace: Trace, runtime: Runtime) -> None:
        base, shipped = RepairTask._base.pop(id(runtime), ("", []))
        await capture_patch(trace, runtime, base_commit=base, env=GIT, ignore=shipped)

    @metric
    async def patch_lines(self, trace: Trace) -> float:
        return float(len(trace.info.get("patch", "").splitlines()))

    @reward
    async def fixed(self, trace: Trace, runtime: Runtime) -> float:
        result = await runtime.run(["python3", "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_calc.py"], {})
        outcomes = parse_pytest_outcomes(result.stdout)
        return float(all(outcomes.get(test) == "PASSED" for test in self.data.failing))


class RepairTasksetConfig(TasksetConfig):
    task: TaskConfig = TaskConfig()


class RepairTaskset(Taskset[RepairTask, RepairTasksetConfig]):
    def load(self) -> list[RepairTask]:
        data = RepairData(idx=0, prompt="The test test_add fails. Fix calc.py.", failing=["test_calc.py::test_add"])
        return [RepairTask(data, self.config.task)]


__all__ = ["RepairTaskset"]

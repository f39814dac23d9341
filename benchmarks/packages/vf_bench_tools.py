"""The benchmarks' v1 tool taskset (``benchmarks/orchestrator.py``), written to load under ours and
the original 0.4.0 alike: add two numbers with the ``calc_add`` tool of one shared MCP server per
worker (``Taskset.toolsets``), then answer; reward 1 when the last reply is the sum."""

from __future__ import annotations

import verifiers.v1 as vf


class AddData(vf.TaskData):
    a: int
    b: int


class Calculator(vf.Toolset[vf.SharedToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    async def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class AddTask(vf.Task[AddData]):
    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(self.data.a + self.data.b))


class AddConfig(vf.TasksetConfig):
    n: int = 8


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self):
        for i in range(self.config.n):
            yield AddTask(AddData(prompt=f"{i}: what is 2 + 3? Use the tool.", a=2, b=3, id=f"a{i}"))

    @classmethod
    def toolsets(cls, config: AddConfig):
        return [Calculator(vf.SharedToolsetConfig())]


__all__ = ["AddTaskset"]


if __name__ == "__main__":  # the original launches a toolset server as ``python -m <its module>``
    Calculator.run()

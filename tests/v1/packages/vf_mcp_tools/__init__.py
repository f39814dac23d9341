"""A v1 taskset whose tools are MCP servers (the toolset tests): add two numbers with a
per-rollout ``calc`` server, keep a per-rollout ledger on one shared ``ledger`` server
(``shared = true``), or call a server already running at ``[task] url``. The tools the tests
follow report their server's pid."""

from __future__ import annotations

import asyncio
import os
import time

import verifiers.v1 as vf


class SumData(vf.TaskData):
    a: int
    b: int


class LedgerState(vf.State):
    items: list[str] = []
    pids: list[int] = []


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    """A per-rollout server (``Task.toolsets``)."""

    TOOL_PREFIX = "calc"

    async def setup_task(self, task: SumData) -> None:
        self.task = task  # the rollout's own task data reached the server process

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @vf.tool
    async def whoami(self) -> str:
        """This server's process id, the task it was set up for, and its working folder."""
        return f"{os.getpid()} {self.task.a}+{self.task.b} {os.getcwd()}"

    @vf.tool
    def boom(self) -> str:
        """Always fails."""
        raise ValueError("the calculator broke")

    @vf.tool
    def big(self, n: int) -> str:
        """``n`` characters."""
        return "x" * n

    @vf.tool
    def hang(self) -> str:
        """Never returns (a blocking call)."""
        time.sleep(3600)
        return "never"

    @vf.tool
    async def hang_async(self) -> str:
        """Never returns (an awaiting call)."""
        await asyncio.sleep(3600)
        return "never"

    @vf.tool
    def chatty(self) -> str:
        """Prints to stdout (the protocol's stream) before answering."""
        print("this line must not reach the MCP stream")
        return "still fine"


class LedgerToolset(vf.Toolset[vf.SharedToolsetConfig, LedgerState]):
    """A shared server (``Taskset.toolsets``): one process for the run, a state per rollout."""

    TOOL_PREFIX = "ledger"

    @vf.tool
    async def record(self, item: str) -> str:
        """Append ``item`` to this rollout's ledger."""
        await asyncio.sleep(0.05)  # let other rollouts' calls interleave with this one
        self.state.items.append(item)
        self.state.pids.append(os.getpid())
        return f"{len(self.state.items)} items: {','.join(self.state.items)}"

    @vf.tool
    async def record_then_fail(self, item: str) -> str:
        """Append ``item``, then fail: a tool that raises sends no state back."""
        self.state.items.append(item)
        raise ValueError(f"no room for {item}")


class BrokenToolset(vf.Toolset[vf.ToolsetConfig]):
    """Its server fails in setup()."""

    async def setup(self) -> None:
        raise RuntimeError("no index on this machine")


class RemoteToolset(vf.Toolset[vf.ToolsetConfig]):
    """Nothing of this class runs: its config's ``url`` names the server."""

    TOOL_PREFIX = "remote"


class SumTaskConfig(vf.TaskConfig):
    url: str | None = None
    """Reach the MCP server at this URL instead of starting ``calc`` servers."""
    broken: bool = False
    """Start a server that fails instead."""
    colocated: bool = False
    """Run the ``calc`` server in the rollout's own working folder."""


class SumTask(vf.Task[SumData, LedgerState, SumTaskConfig]):
    @vf.reward
    def correct(self, task: SumData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(task.a + task.b))

    @vf.metric
    def ledger(self, trace: vf.Trace) -> float:
        return float(len(trace.state.items))

    @classmethod
    def toolsets(cls, config: SumTaskConfig):
        if config.url:
            return [RemoteToolset(vf.ToolsetConfig(url=config.url))]
        if config.broken:
            return [BrokenToolset(vf.ToolsetConfig())]
        return [CalcToolset(vf.ToolsetConfig(colocated=config.colocated))]


class SumConfig(vf.TasksetConfig):
    task: SumTaskConfig = SumTaskConfig()
    n: int = 2
    shared: bool = False
    """Serve the shared ``ledger`` toolset too."""


class McpTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            yield SumTask(SumData(prompt=f"What is {i} + {i + 10}?", a=i, b=i + 10, id=f"m{i}"), self.config.task)

    @classmethod
    def toolsets(cls, config: SumConfig):
        return [LedgerToolset(vf.SharedToolsetConfig())] if config.shared else []


__all__ = ["McpTaskset"]

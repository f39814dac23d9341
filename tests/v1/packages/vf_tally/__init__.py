"""A tool that bumps a per-rollout tally on its MCP server's ``State`` (the shape of real v1 tasksets
whose ``@vf.stop`` reads what the tools left on ``trace.state``): ``until`` ends the rollout once
the tally reaches the task's target; a task with no target runs to its agent's ``max_turns``."""

import verifiers.v1 as vf


class TallyState(vf.State):
    tally: int = 0


class TallyToolset(vf.Toolset[vf.ToolsetConfig, TallyState]):
    TOOL_PREFIX = "tally"

    @vf.tool
    def bump(self) -> str:
        """Add one to the tally."""
        self.state.tally += 1
        return str(self.state.tally)


class TallyData(vf.TaskData):
    target: int | None = None


class TallyTask(vf.Task[TallyData, TallyState]):
    @classmethod
    def toolsets(cls, config):
        return [TallyToolset(vf.ToolsetConfig())]

    @vf.stop
    async def until(self, trace: vf.Trace) -> bool:
        return self.data.target is not None and trace.state.tally >= self.data.target

    @vf.metric
    async def tally(self, trace: vf.Trace) -> float:
        return float(trace.state.tally)


class TallyTaskset(vf.Taskset[TallyTask, vf.TasksetConfig]):
    def load(self):
        yield TallyTask(TallyData(idx=0, prompt="bump until told to stop", target=2), self.config.task)
        yield TallyTask(TallyData(idx=1, prompt="bump forever"), self.config.task)


__all__ = ["TallyTaskset"]

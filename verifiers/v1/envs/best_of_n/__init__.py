"""``best-of-n``: ``n`` independent attempts at the task, then compared: ``best`` marks the
attempts with the top reward, ``pass_at_n`` whether any reached ``threshold``."""

import asyncio

from pydantic import Field

from verifiers.v1.agents import AgentConfig, Agents
from verifiers.v1.env import Env
from verifiers.v1.episode import Episode
from verifiers.v1.loading import EnvConfig
from verifiers.v1.task import Task


class BestOfNEnvConfig(EnvConfig):
    agent: AgentConfig = AgentConfig()
    n: int = Field(4, ge=1)
    threshold: float = 1.0


class BestOfNEnv(Env[BestOfNEnvConfig]):
    async def run(self, task: Task, agents: Agents) -> None:
        # a failing attempt is data on its own trace; the siblings still finish
        await asyncio.gather(*(agents.agent.run(task) for _ in range(self.config.n)))

    async def finalize(self, task: Task, episode: Episode) -> None:
        if not episode.traces:
            return
        top = max(t.reward for t in episode.traces)
        solved = float(top >= self.config.threshold)
        for trace in episode.traces:
            trace.record_metric("best", float(trace.reward == top))
            trace.record_metric("pass_at_n", solved)


__all__ = ["BestOfNEnv", "BestOfNEnvConfig"]

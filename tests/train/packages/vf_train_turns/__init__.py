"""A two-turn v1 environment for the training tests: the agent answers the task, the env asks
once more (``follow_up``, a user message), the agent answers again. Reward: a shorter last reply
scores higher, so a group of a random model's replies has signal."""

from __future__ import annotations

import verifiers.v1 as vf


class TurnsTask(vf.Task):
    @vf.reward
    def short(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply))


class TurnsConfig(vf.TasksetConfig):
    n: int = 4


class TurnsTaskset(vf.Taskset[TurnsTask, TurnsConfig]):
    def load(self):
        for i in range(self.config.n):
            yield TurnsTask(vf.TaskData(prompt=f"Say {i}.", name=f"say-{i}"))


class TurnsEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()
    follow_up: str = "Once more."


class TurnsEnv(vf.Env[TurnsEnvConfig]):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as it:
            await it.turn()
            await it.turn(self.config.follow_up)


__all__ = ["TurnsEnv", "TurnsTaskset"]

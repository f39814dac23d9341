"""``single-agent``: one ``agent`` role plays the task (the env every plain taskset runs in)."""

from verifiers.v1.agents import AgentConfig, Agents
from verifiers.v1.env import Env
from verifiers.v1.loading import EnvConfig
from verifiers.v1.task import Task


class SingleAgentEnvConfig(EnvConfig):
    agent: AgentConfig = AgentConfig()


class SingleAgentEnv(Env[SingleAgentEnvConfig]):
    async def run(self, task: Task, agents: Agents) -> None:
        await agents.agent.run(task)


__all__ = ["SingleAgentEnv", "SingleAgentEnvConfig"]

"""``user-sim``: a modeled user (its own agent, tool-less, untrainable) talks with the assistant.

The task's prompt text is the user's scenario (in its system prompt, ``persona``); the assistant
plays the same task with the prompt removed and learns the goal only from the conversation. The
user ends it by replying ``done_marker``; its ``max_turns`` caps a run-away exchange. The
assistant's trace is scored by the task's own rewards (which must read non-prompt fields).
"""

from pydantic import Field

from verifiers.v1.agents import AgentConfig, Agents
from verifiers.v1.env import Env
from verifiers.v1.episode import Episode
from verifiers.v1.harness import HarnessConfig
from verifiers.v1.loading import EnvConfig
from verifiers.v1.task import Task, TaskData

DONE = "###DONE###"
PERSONA = (
    "You are playing a USER who talks to an AI assistant. Your situation and what you want from the assistant:\n\n"
    "{scenario}\n\n"
    "Write short, natural messages as the user; never answer as the assistant or do its work. "
    "Give details only when asked. When your goal is met, or cannot be met, reply with exactly {done}."
)


class UserSimEnvConfig(EnvConfig):
    assistant: AgentConfig = AgentConfig()
    user: AgentConfig = AgentConfig(harness=HarnessConfig(id="null"), max_turns=8)
    persona: str = PERSONA
    """The user's system prompt: ``{scenario}`` and ``{done}`` are replaced (plain replacement)."""
    done_marker: str = Field(DONE, min_length=1)
    greeting: str = "Hello! How can I help you today?"


class UserSimEnv(Env[UserSimEnvConfig]):
    async def setup(self, agents: Agents) -> None:
        agents.user.trainable = False

    async def run(self, task: Task, agents: Agents) -> None:
        persona = self.config.persona.replace("{done}", self.config.done_marker).replace("{scenario}", task.data.prompt_text)
        user_task = Task(TaskData(idx=task.data.idx, system_prompt=persona))
        assistant_task = type(task)(task.data.model_copy(update={"prompt": None}), task.config)
        done = self.config.done_marker
        async with agents.user.interaction(user_task) as sim, agents.assistant.interaction(assistant_task) as assistant:
            ask = await sim.turn(self.config.greeting)
            while not ask.terminated and ask.last_reply.strip() != done:
                answer = await assistant.turn(ask.last_reply)
                if answer.terminated and not answer.last_reply:
                    break
                ask = await sim.turn(answer.last_reply)

    async def finalize(self, task: Task, episode: Episode) -> None:
        users = [t for t in episode.traces if t.agent.name == "user"]
        for trace in episode.traces:
            if trace.agent.name == "assistant" and users:
                trace.record_metric("user_turns", float(users[0].num_turns))


__all__ = ["UserSimEnv", "UserSimEnvConfig"]

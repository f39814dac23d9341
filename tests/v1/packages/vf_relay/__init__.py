"""A v1 package exporting its own Env beside its taskset: a writer drafts, an editor shortens."""

from __future__ import annotations

import verifiers.v1 as vf


class RelayTask(vf.Task):
    @vf.reward
    def short(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply) <= 5)


class RelayTaskset(vf.Taskset[RelayTask]):
    def load(self):
        yield RelayTask(vf.TaskData(prompt="Write a poem."))


class RelayConfig(vf.EnvConfig):
    writer: vf.AgentConfig = vf.AgentConfig()
    editor: vf.AgentConfig = vf.AgentConfig(sampling={"temperature": 0.0})


class RelayEnv(vf.Env[RelayConfig]):
    events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    async def setup(self, agents) -> None:
        self.events.append("setup")

    async def run(self, task, agents):
        self.events.append("run")
        draft = await agents.writer.run(task)
        edit_task = type(task)(task.data.model_copy(update={"prompt": f"Shorten: {draft.last_reply}"}))
        await agents.editor.run(edit_task)

    def complete(self, episode):
        return any(t.agent.name == "editor" and t.ok for t in episode.traces)


__all__ = ["RelayEnv", "RelayTaskset"]

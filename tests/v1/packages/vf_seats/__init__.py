"""Two seats taking turns through live interactions, refereed by the env's ``run`` (the shape of a
two-player game written for the original 0.4 release): each seat's task has no prompt, only a
system prompt, so it converses through ``interaction.turn``; the env records the payoff."""

import verifiers.v1 as vf


class SeatsEnvConfig(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    second: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    rounds: int = 2


class SeatsEnv(vf.Env[SeatsEnvConfig]):
    async def run(self, task, agents):
        seats = [
            vf.Task(vf.TaskData(idx=task.data.idx, prompt=None, system_prompt=f"You are seat {i}."))
            for i in (0, 1)
        ]
        said: list[str] = []
        async with agents.first.interaction(seats[0]) as a, agents.second.interaction(seats[1]) as b:
            for r in range(self.config.rounds):
                for it in (a, b):
                    segment = await it.turn(f"round {r}: say a number")
                    if segment.terminated:
                        break
                    said.append(segment.last_reply)
        for i, trace in enumerate((a.trace, b.trace)):
            trace.record_reward("spoke", float(len(said)))
            trace.record_metric("seat", float(i))


class SeatsTaskset(vf.Taskset):
    def load(self):
        return [vf.Task(vf.TaskData(idx=0, prompt=None))]


__all__ = ["SeatsEnv", "SeatsTaskset"]

"""A small v1 taskset for the tests: add two numbers, answer in the last reply."""

from __future__ import annotations

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: int


class ArithTaskConfig(vf.TaskConfig):
    bonus: float = 0.0


class ArithTask(vf.Task[ArithData, vf.State, ArithTaskConfig]):
    @vf.reward(weight=2.0)
    def correct(self, task: ArithData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(task.answer))

    @vf.reward(weight=0.5, priority=5)
    async def bonus(self, trace) -> float:
        return self.config.bonus

    @vf.metric
    def reply_length(self, trace) -> float:
        return len(trace.last_reply)

    @vf.stop
    def said_done(self, trace: vf.Trace) -> bool:
        return "done" in trace.last_reply


class ArithConfig(vf.TasksetConfig):
    n: int = 4
    start: int = 0


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self):
        for i in range(self.config.start, self.config.start + self.config.n):
            yield ArithTask(ArithData(prompt=f"{i} + {i}?", answer=2 * i, name=f"add-{i}", id=f"a{i}"), self.config.task)


__all__ = ["ArithData", "ArithTask", "ArithTaskset"]

"""A v1 taskset for the env-layer tests: add two numbers (reward: the last reply is the sum),
with a calculator toolset, a stop on the word STOP and an intercept that rewrites SECRET."""

from __future__ import annotations

import verifiers.v1 as vf


class SumData(vf.TaskData):
    a: int
    b: int


class Calculator:
    """A toolset: its @vf.tool methods are offered to the model."""

    def __init__(self) -> None:
        self.calls = 0

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        self.calls += 1
        return str(a + b)

    @vf.tool
    async def explode(self) -> str:
        """Always fails."""
        raise RuntimeError("boom")


class SumTask(vf.Task[SumData]):
    @vf.reward
    def correct(self, task: SumData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(task.a + task.b))

    @vf.metric
    def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)

    @vf.stop
    def said_stop(self, response: vf.Response) -> bool:
        return "STOP" in (response.message.content or "")

    @vf.intercept
    def redact(self, request: vf.Request) -> vf.Request | None:
        last = request.messages[-1]
        if isinstance(last, vf.UserMessage) and isinstance(last.content, str) and "SECRET" in last.content:
            messages = [*request.messages[:-1], vf.UserMessage(content=last.content.replace("SECRET", "[redacted]"))]
            return vf.Request(messages=messages, tools=request.tools)
        return None

    @classmethod
    def toolsets(cls, config):
        return [Calculator()]


class SumConfig(vf.TasksetConfig):
    n: int = 3
    word: str = ""


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            yield SumTask(SumData(prompt=f"{self.config.word}What is {i} + {i + 1}?", a=i, b=i + 1, id=f"s{i}"))


__all__ = ["SumTaskset"]

"""A multi-turn v1 taskset for the token-sample tests, played by ``vf_train_turns``'s env: the
agent has an ``add`` tool, answers the task, the env asks once more (a user message), the agent
answers again. A task with ``strip_history`` rewrites the agent's earlier replies before each model
call (an intercept that drops their ``<think>`` blocks): an environment that changes earlier
messages on purpose.
Reward: a shorter last reply scores higher (a group of a random model's replies has signal)."""

from __future__ import annotations

import re

from vf_train_turns import TurnsEnv  # the two-turn env (the tests put packages/ on the path)

import verifiers.v1 as vf

THINK = re.compile(r"<think>.*?</think>", re.S)


class ThinkData(vf.TaskData):
    strip_history: bool = False


class Calculator:
    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class ThinkTask(vf.Task[ThinkData]):
    @vf.reward
    def short(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply))

    @vf.intercept
    def strip(self, request: vf.Request) -> vf.Request | None:
        if not self.data.strip_history:
            return None
        messages = [
            m.model_copy(update={"content": THINK.sub("", m.content)})
            if isinstance(m, vf.AssistantMessage) and isinstance(m.content, str) and "<think>" in m.content else m
            for m in request.messages
        ]  # fmt: skip
        return vf.Request(messages=messages, tools=request.tools)

    @classmethod
    def toolsets(cls, config):
        return [Calculator()]


class ThinkConfig(vf.TasksetConfig):
    n: int = 2
    strip_history: bool = False


class ThinkTaskset(vf.Taskset[ThinkTask, ThinkConfig]):
    def load(self):
        for i in range(self.config.n):
            yield ThinkTask(ThinkData(prompt=f"Add {i} and 2.", name=f"add-{i}", strip_history=self.config.strip_history))


__all__ = ["ThinkTaskset", "TurnsEnv"]

"""A v1 package that ships its own harness beside its taskset: a role that names no harness runs it."""

from __future__ import annotations

import verifiers.v1 as vf
from verifiers.v1.harness import Harness, HarnessConfig


class EchoData(vf.TaskData):
    word: str


class EchoTask(vf.Task[EchoData]):
    @vf.reward
    def shouted(self, task: EchoData, trace: vf.Trace) -> float:
        return float(trace.last_reply == task.word.upper())


class EchoConfig(vf.TasksetConfig):
    n: int = 2


class EchoTaskset(vf.Taskset[EchoTask, EchoConfig]):
    def load(self):
        for i, word in enumerate(["alpha", "beta", "gamma"][: self.config.n]):
            yield EchoTask(EchoData(prompt=f"Shout {word}.", word=word, id=f"w{i}"))


class ShoutHarnessConfig(HarnessConfig):
    id: str = "vf-own-harness"


class ShoutHarness(Harness[ShoutHarnessConfig]):
    """The null chat loop plus one tool of its own, ``shout``."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    IN_PROCESS = True

    def extra_tools(self, runtime: object) -> dict:
        def shout(text: str) -> str:
            """Upper-case a text."""
            return text.upper()

        return {"shout": shout}


__all__ = ["EchoTaskset", "ShoutHarness"]

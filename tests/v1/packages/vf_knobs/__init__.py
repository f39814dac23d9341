"""A v1 taskset with knobs of every kind a command line sets (the flag-typing tests): text that
looks like a number, a bool, JSON or null; an optional text; a list; a flag; a number; a table."""

from __future__ import annotations

import verifiers.v1 as vf


class KnobsConfig(vf.TasksetConfig):
    subset: str = "default"
    tag: str | None = None
    words: list[str] = []
    hint: bool = False
    count: int = 1
    weights: dict[str, float] = {}


class KnobsTaskset(vf.Taskset[vf.Task, KnobsConfig]):
    def load(self):
        for i in range(self.config.count):
            yield vf.Task(vf.TaskData(prompt=f"{self.config.subset} {i}"))


__all__ = ["KnobsTaskset"]

"""An endless v1 taskset: counts up forever, recording how far load() was read."""

import itertools

import verifiers.v1 as vf

READ: list[int] = []


class CountTask(vf.Task):
    pass


class Counter(vf.Taskset[CountTask]):
    INFINITE = True

    def load(self):
        for i in itertools.count():
            READ.append(i)
            yield CountTask(vf.TaskData(prompt=str(i), name=f"n{i}"))


__all__ = ["Counter"]

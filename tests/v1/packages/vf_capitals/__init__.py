"""A v1 taskset for the judge tests: name a country's capital. Its own reward is exact match;
the judges (plugged from config) grade the same reply by the ``capital`` field. The task also
declares an artifact (``answer.txt``, written by its finalize from the last reply) for the
isolated judge envs."""

from __future__ import annotations

import verifiers.v1 as vf

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima")]


class CapitalData(vf.TaskData):
    country: str
    capital: str


class CapitalTask(vf.Task[CapitalData]):
    @vf.reward
    def exact(self, task: CapitalData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip().lower() == task.capital.lower())

    async def finalize(self, trace, runtime) -> None:
        await runtime.write("answer.txt", trace.last_reply)


class CapitalsConfig(vf.TasksetConfig):
    n: int = 4


class CapitalsTaskset(vf.Taskset[CapitalTask, CapitalsConfig]):
    def load(self):
        for country, capital in CAPITALS[: self.config.n]:
            yield CapitalTask(
                CapitalData(
                    prompt=f"What is the capital of {country}? Answer with the city only.",
                    country=country, capital=capital, artifacts=[vf.Artifact(source="answer.txt")],
                ),
                self.config.task,
            )


__all__ = ["CapitalsTaskset"]

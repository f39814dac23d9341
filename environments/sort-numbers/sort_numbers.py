"""sort-numbers: a v1 taskset (``import verifiers.v1 as vf``).

Each task shows a short list of integers; the model answers with the list sorted ascending, the
numbers separated by spaces or commas. Tasks are generated from a seed, so the same config always
gives the same tasks, and the taskset never reads a file or the network.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import verifiers.v1 as vf

SYSTEM_PROMPT = "Reply with the numbers sorted from smallest to largest, separated by spaces, and nothing else."
_INT = re.compile(r"-?\d+")


class SortData(vf.TaskData):
    numbers: list[int]


def parse_numbers(reply: str) -> list[int]:
    """The integers of a reply, in the order written (a trailing explanation is ignored)."""
    return [int(m) for m in _INT.findall(reply or "")]


class SortTask(vf.Task[SortData]):
    @vf.reward(weight=1.0)
    def sorted_exactly(self, task: SortData, trace: vf.Trace) -> float:
        return float(parse_numbers(trace.last_reply) == sorted(task.numbers))

    @vf.metric
    def in_place(self, task: SortData, trace: vf.Trace) -> float:
        """Share of positions that hold the right number (partial credit, not in the reward)."""
        want = sorted(task.numbers)
        got = parse_numbers(trace.last_reply)
        return sum(1 for a, b in zip(got, want, strict=False) if a == b) / len(want)


class SortConfig(vf.TasksetConfig):
    n: int = 200
    min_len: int = 3
    max_len: int = 6
    low: int = -50
    high: int = 99
    seed: int = 0


class SortNumbers(vf.Taskset[SortTask, SortConfig]):
    def load(self) -> Iterator[SortTask]:
        cfg = self.config
        if not 1 <= cfg.min_len <= cfg.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {cfg.min_len} and {cfg.max_len}")
        if cfg.low > cfg.high:
            raise ValueError(f"need low <= high, got {cfg.low} and {cfg.high}")
        rng = random.Random(cfg.seed)
        for i in range(cfg.n):
            numbers = [rng.randint(cfg.low, cfg.high) for _ in range(rng.randint(cfg.min_len, cfg.max_len))]
            yield SortTask(
                SortData(
                    idx=i,
                    prompt=" ".join(map(str, numbers)),
                    system_prompt=SYSTEM_PROMPT,
                    numbers=numbers,
                )
            )


__all__ = ["SortNumbers"]

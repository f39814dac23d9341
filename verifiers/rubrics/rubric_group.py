"""``RubricGroup``: several rubrics whose rewards add up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.rubrics.rubric import Rubric, ScoreResult, apply_scores

__all__ = ["RubricGroup"]


class RubricGroup(Rubric):
    """Scores with every member rubric; reward = sum of member rewards, metrics merged.

    Each member keeps its own parser and class objects; :meth:`add_class_object` adds to all.
    New reward functions added to the group go to the first member.
    """

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any) -> None:
        if not rubrics:
            raise ValueError("RubricGroup needs at least one rubric")
        self.rubrics: list[Rubric] = list(rubrics)
        super().__init__(parser=self.rubrics[0].parser, **kwargs)

    @property
    def funcs(self) -> list[Callable[..., Any]]:  # type: ignore[override]
        return [f for r in self.rubrics for f in r.funcs]

    @funcs.setter
    def funcs(self, value: list[Callable[..., Any]]) -> None:
        if value:
            raise AttributeError("add functions to a member rubric of a RubricGroup")

    @property
    def weights(self) -> list[float]:  # type: ignore[override]
        return [w for r in self.rubrics for w in r.weights]

    @weights.setter
    def weights(self, value: list[float]) -> None:
        if value:
            raise AttributeError("set weights on a member rubric of a RubricGroup")

    def add_reward_func(self, func: Callable[..., Any], weight: float = 1.0) -> None:
        self.rubrics[0].add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        self.class_objects[name] = obj
        for r in self.rubrics:
            r.add_class_object(name, obj)

    async def compute_scores(self, states: Sequence[dict[str, Any]]) -> list[ScoreResult]:
        combined = [ScoreResult(0.0, {}, None) for _ in states]
        for rubric in self.rubrics:
            for acc, res in zip(combined, await rubric.compute_scores(states), strict=True):
                acc.reward += res.reward
                acc.metrics.update(res.metrics)
                if acc.error is None and res.error is not None:
                    acc.error = res.error
        for acc in combined:
            if acc.error is not None:
                acc.reward = 0.0
        return combined

    async def score_group(self, states: Sequence[dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        results = await self.compute_scores(states)
        apply_scores(states, results, (time.perf_counter() - t0) * 1000.0)

    def __repr__(self) -> str:
        return f"RubricGroup({self.rubrics!r})"

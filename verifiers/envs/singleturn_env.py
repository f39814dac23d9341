"""``SingleTurnEnv``: one model turn per rollout (question -> answer)."""

from __future__ import annotations

from typing import Any

from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.types import State

__all__ = ["SingleTurnEnv"]


class SingleTurnEnv(MultiTurnEnv):
    """The model answers once; the rubric scores the answer."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["max_turns"] = 1
        super().__init__(**kwargs)

    async def env_response(self, messages: Any, state: State, **kwargs: Any) -> Any:
        # Never reached: max_turns=1 stops the rollout after the model's turn.
        return []

"""The original's module path ``verifiers.v1.configs.task``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.configs``."""

from __future__ import annotations

from verifiers.v1.configs import DecoratedFunctionConfig, RewardFunctionConfig, TaskConfig

__all__ = ["DecoratedFunctionConfig", "RewardFunctionConfig", "TaskConfig"]

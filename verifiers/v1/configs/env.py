"""The original's module path ``verifiers.v1.configs.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.loading``."""

from __future__ import annotations

from verifiers.v1.agents import TimeoutConfig
from verifiers.v1.loading import EnvConfig

__all__ = ["EnvConfig", "TimeoutConfig"]

"""The original's module path ``verifiers.v1.configs.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.loading``."""

from __future__ import annotations

from verifiers.v1.loading import EnvConfig, EnvTimeoutConfig

TimeoutConfig = EnvTimeoutConfig  # the original's name here: the env's own deadlines

__all__ = ["EnvConfig", "TimeoutConfig"]

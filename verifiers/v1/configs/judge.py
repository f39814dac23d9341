"""The original's module path ``verifiers.v1.configs.judge``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.configs``."""

from __future__ import annotations

from verifiers.v1.configs import JudgeConfig, Judges, resolve_judges

__all__ = ["JudgeConfig", "Judges", "resolve_judges"]

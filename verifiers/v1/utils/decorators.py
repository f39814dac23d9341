"""The original's module path ``verifiers.v1.utils.decorators``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.decorators``."""

from __future__ import annotations

from verifiers.v1.decorators import discover_decorated, intercept, metric, reward, stop, tool

__all__ = ["discover_decorated", "intercept", "metric", "reward", "stop", "tool"]

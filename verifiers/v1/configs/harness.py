"""The original's module path ``verifiers.v1.configs.harness``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.harness``."""

from __future__ import annotations

from verifiers.v1.harness import HarnessConfig

__all__ = ["HarnessConfig"]

"""The original's module path ``verifiers.v1.harnesses.bash.harness``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.harnesses.bash``."""

from __future__ import annotations

from verifiers.v1.compaction import CompactionConfig
from verifiers.v1.harnesses.bash import BashHarness, BashHarnessConfig

__all__ = ["BashHarness", "BashHarnessConfig", "CompactionConfig"]
